// Checks that a shared library's headers, segments and sections lie inside the file, so that a
// truncated library in the kernel cache is rebuilt instead of crashing the process in dlopen().
#include "cache/elf_check.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tessel::detail {

namespace {

// The ELF machine this process runs on; 0 where unknown (then any machine is accepted).
constexpr int host_machine() {
#if defined(__x86_64__)
  return EM_X86_64;
#elif defined(__aarch64__)
  return EM_AARCH64;
#elif defined(__i386__)
  return EM_386;
#elif defined(__arm__)
  return EM_ARM;
#elif defined(__powerpc64__)
  return EM_PPC64;
#elif defined(__riscv)
  return EM_RISCV;
#else
  return 0;
#endif
}

class File {
 public:
  explicit File(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  int fd() const { return fd_; }
  // Reads exactly `n` bytes at `offset`; false on a short read or an error.
  bool read_at(void* out, uint64_t n, uint64_t offset) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      n -= static_cast<uint64_t>(got);
      offset += static_cast<uint64_t>(got);
    }
    return true;
  }

 private:
  int fd_;
};

// True when [offset, offset + count * each) lies inside a file of `size` bytes, without overflow.
bool inside(uint64_t offset, uint64_t count, uint64_t each, uint64_t size) {
  if (offset > size) return false;
  if (each != 0 && count > (size - offset) / each) return false;
  return true;
}

template <class Ehdr, class Phdr, class Shdr>
std::string check_tables(const File& file, uint64_t size) {
  Ehdr eh;
  if (size < sizeof eh || !file.read_at(&eh, sizeof eh, 0)) return "shorter than an ELF header";
  if (eh.e_type != ET_DYN)
    return "not a shared library (ELF type " + std::to_string(eh.e_type) + ")";
  if (host_machine() != 0 && eh.e_machine != host_machine())
    return "built for another machine (ELF machine " + std::to_string(eh.e_machine) + ")";
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Phdr)) return "no usable program headers";
  if (!inside(eh.e_phoff, eh.e_phnum, sizeof(Phdr), size)) return "program headers past the end";
  std::vector<Phdr> ph(eh.e_phnum);
  if (!file.read_at(ph.data(), ph.size() * sizeof(Phdr), eh.e_phoff))
    return "program headers unreadable";
  for (const Phdr& p : ph)
    if (!inside(p.p_offset, 1, p.p_filesz, size))
      return "a segment of " + std::to_string(p.p_filesz) + " bytes at offset " +
             std::to_string(p.p_offset) + " lies past the end";
  // The linker writes the section header table last, so a cut anywhere shows here even where the
  // segments still fit.
  if (eh.e_shoff == 0) return "no section headers";
  if (eh.e_shentsize != sizeof(Shdr)) return "unusable section headers";
  if (!inside(eh.e_shoff, eh.e_shnum, sizeof(Shdr), size)) return "section headers past the end";
  std::vector<Shdr> sh(eh.e_shnum);
  if (!file.read_at(sh.data(), sh.size() * sizeof(Shdr), eh.e_shoff))
    return "section headers unreadable";
  for (const Shdr& s : sh)
    if (s.sh_type != SHT_NOBITS && !inside(s.sh_offset, 1, s.sh_size, size))
      return "a section of " + std::to_string(s.sh_size) + " bytes at offset " +
             std::to_string(s.sh_offset) + " lies past the end";
  return "";
}

}  // namespace

std::string elf_library_problem(const std::string& path) {
  File file(path);
  struct stat st;
  if (file.fd() < 0 || ::fstat(file.fd(), &st) != 0) return "cannot be read";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  unsigned char ident[EI_NIDENT];
  if (size < EI_NIDENT || !file.read_at(ident, EI_NIDENT, 0) ||
      std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    return "not an ELF file";
  const int want_class = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
  const int want_data = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
  if (ident[EI_CLASS] != want_class || ident[EI_DATA] != want_data)
    return "ELF class or byte order of another machine";
  return ident[EI_CLASS] == ELFCLASS64
             ? check_tables<Elf64_Ehdr, Elf64_Phdr, Elf64_Shdr>(file, size)
             : check_tables<Elf32_Ehdr, Elf32_Phdr, Elf32_Shdr>(file, size);
}

}  // namespace tessel::detail
