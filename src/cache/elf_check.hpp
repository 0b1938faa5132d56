// Structural check of a shared library before dlopen(): a file cut short (or otherwise not a
// whole library) is mapped by the loader anyway and kills the process with SIGBUS on first touch.
#pragma once

#include <string>

namespace tessel::detail {

// Why the file at `path` is not a complete ELF shared library for this machine ("" when it is):
// its header, program headers, segments, section headers and sections must all lie inside the
// file. Reads only the headers, so it costs a few small reads whatever the library's size. The
// manifest's checksum only proves that the file is what the manifest says; this proves that what
// dlopen() will map exists, whoever wrote the manifest.
std::string elf_library_problem(const std::string& path);

}  // namespace tessel::detail
