/*
 * Replays every file of a corpus directory through a libFuzzer target, so
 * that the fuzz-smoke ctest runs under gcc with ASan and UBSan as well.
 * Exits non-zero when the directory is missing or empty.
 */
#include <sys/stat.h>

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *, size_t);

static int
replay_file(const char *path)
{
	FILE *f;
	struct stat st;
	uint8_t *buf;
	size_t n;

	if ((f = fopen(path, "rb")) == NULL || fstat(fileno(f), &st) == -1) {
		perror(path);
		if (f != NULL)
			fclose(f);
		return -1;
	}
	/* An exact-size copy, so ASan catches reads past the input. */
	if ((buf = malloc(st.st_size > 0 ? (size_t)st.st_size : 1)) == NULL) {
		fclose(f);
		return -1;
	}
	n = fread(buf, 1, (size_t)st.st_size, f);
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

int
main(int argc, char **argv)
{
	DIR *d;
	struct dirent *de;
	char path[4096];
	int n = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
		return 2;
	}
	if ((d = opendir(argv[1])) == NULL) {
		perror(argv[1]);
		return 1;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", argv[1], de->d_name);
		if (replay_file(path) == -1) {
			closedir(d);
			return 1;
		}
		n++;
	}
	closedir(d);
	printf("replayed %d inputs from %s\n", n, argv[1]);
	return n > 0 ? 0 : 1;
}
