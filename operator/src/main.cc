// c4-operator entry point. The controller itself lands with issue #5; until then this binary
// only answers --help/--version and refuses to pretend it runs.
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  const char* usage =
      "usage: c4-operator [--help] [--version]\n"
      "The C4 operator (TrainingJob reconciler, C4D, C4P). Not built yet in this version.\n";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return 0;
    }
    if (std::strcmp(argv[i], "--version") == 0) {
      std::puts("c4-operator " C4_VERSION);
      return 0;
    }
    std::fprintf(stderr, "c4-operator: unknown flag \"%s\"\n%s", argv[i], usage);
    return 2;
  }
  std::fputs("c4-operator: the controller is not implemented in this version\n", stderr);
  return 1;
}
