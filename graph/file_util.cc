// Whole-file reads and atomic writes.
#include "graph/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "graph/error.h"

namespace ot {

std::string ReadFileBytes(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read '" + path + "': it is a directory or cannot be examined");
  }
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      throw Error("cannot read '" + path + "': " + (n == 0 ? std::string("unexpected end of file") : std::strerror(e)));
    }
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

void MakeDirectories(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) {
      OT_CHECK(S_ISDIR(st.st_mode), "'%s' exists and is not a folder", prefix.c_str());
      continue;
    }
    OT_CHECK(::mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST, "cannot create folder '%s': %s", prefix.c_str(),
             std::strerror(errno));
  }
}

std::string DirName(const std::string& path) {
  auto pos = path.find_last_of('/');
  if (pos == std::string::npos) return ".";
  if (pos == 0) return "/";
  return path.substr(0, pos);
}

void WriteFileAtomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write '" + path + "': " + std::strerror(errno) + " (is the folder writable?)");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error("cannot write '" + path + "': " + std::strerror(e) + " (disk full?); the previous file is kept");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int e = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error("cannot write '" + path + "': fsync failed: " + std::strerror(e));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    throw Error("cannot write '" + path + "': rename failed: " + std::strerror(e));
  }
  int dfd = ::open(DirName(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ot
