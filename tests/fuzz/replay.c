/* main() for fuzz targets outside libFuzzer: feed every file of the corpus
 * directory (argv[1]) to LLVMFuzzerTestOneInput once, so ctest replays the
 * corpus on every build (under ASan/UBSan in the sanitizer build). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
	DIR *d;
	struct dirent *e;
	int n = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	d = opendir(argv[1]);
	if (!d) {
		perror(argv[1]);
		return 1;
	}
	while ((e = readdir(d))) {
		char path[4096];
		FILE *f;
		long len;
		uint8_t *buf;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
		f = fopen(path, "rb");
		if (!f)
			continue;
		fseek(f, 0, SEEK_END);
		len = ftell(f);
		fseek(f, 0, SEEK_SET);
		buf = malloc(len > 0 ? (size_t)len : 1);
		if (len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) {
			fclose(f);
			free(buf);
			return 1;
		}
		fclose(f);
		LLVMFuzzerTestOneInput(buf, len > 0 ? (size_t)len : 0);
		free(buf);
		n++;
	}
	closedir(d);
	printf("replayed %d inputs\n", n);
	return n > 0 ? 0 : 1;
}
