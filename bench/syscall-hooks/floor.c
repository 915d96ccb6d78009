// Attaches one family of floor.bpf.c ("raw" or "tp") until stdin closes.
#include <bpf/libbpf.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: floor OBJ raw|tp\n");
		return 2;
	}
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj)
		return 1;
	struct bpf_program *p;
	const char *want = strcmp(argv[2], "raw") == 0 ? "raw_" : "tp_";
	bpf_object__for_each_program(p, obj)
		bpf_program__set_autoload(p, strncmp(bpf_program__name(p), want, strlen(want)) == 0);
	if (bpf_object__load(obj))
		return 1;
	bpf_object__for_each_program(p, obj)
		if (bpf_program__autoload(p) && !bpf_program__attach(p))
			return 1;
	printf("attached\n");
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)
		;
	return 0;
}
