/* sha256.c - SHA-256 as hex (sha256.h). */
#include "sha256.h"

#include <stdlib.h>

EVP_MD_CTX *sha256_start(void)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();

	if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL))
		abort();
	return c;
}

void sha256_add(EVP_MD_CTX *c, const void *p, size_t n)
{
	if (n && !EVP_DigestUpdate(c, p, n))
		abort();
}

void sha256_end_hex(EVP_MD_CTX *c, char hex[SHA256_HEX_LEN])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	if (!EVP_DigestFinal_ex(c, md, &n) || n != 32)
		abort();
	EVP_MD_CTX_free(c);
	hex_encode(md, 32, hex);
}

void sha256_of(const void *p, size_t n, char hex[SHA256_HEX_LEN])
{
	EVP_MD_CTX *c = sha256_start();

	sha256_add(c, p, n);
	sha256_end_hex(c, hex);
}

bool sha256_hex_ok(const char *s)
{
	size_t i;

	if (!s)
		return false;
	for (i = 0; i < 64; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return s[64] == '\0';
}

void hex_encode(const unsigned char *p, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[p[i] >> 4];
		out[2 * i + 1] = digits[p[i] & 15];
	}
	out[2 * n] = '\0';
}
