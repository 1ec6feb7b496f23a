/* pit-status - run in a vm guest (as root) by test_vm: prints the mode of
 * the PIT's channel 0, from its read-back status byte (bits 3-1). */
#include <stdio.h>
#include <sys/io.h>

int main(void)
{
	unsigned char st;

	if (ioperm(0x40, 4, 1) < 0) {
		perror("ioperm");
		return 1;
	}
	outb(0xe2, 0x43);   /* read-back: status only, channel 0 */
	st = inb(0x40);
	printf("%u\n", (st >> 1) & 7);
	return 0;
}
