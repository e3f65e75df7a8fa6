// AtomicFile and FileReader over POSIX calls (open/write/fsync/rename/pread). Writing follows
// the usual durable-replace recipe; the directory fsync makes the rename survive a power cut.
#include "core/base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/base/error.h"

namespace cohort {

namespace {

[[noreturn]] void io_error(const std::string& kind, const std::string& path, const std::string& call, int err) {
  throw_error(Status::kIo, str_cat(kind, " '", path, "': ", call, " failed: ", std::strerror(err)));
}

std::string directory_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

void fsync_directory(const std::string& kind, const std::string& path) {
  const std::string dir = directory_of(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) io_error(kind, path, str_cat("open('", dir, "')"), errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL); the file itself is durable then.
  if (rc != 0 && err != EINVAL) io_error(kind, path, str_cat("fsync('", dir, "')"), err);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path, const std::string& kind) : path_(path), kind_(kind) {
  static std::atomic<uint64_t> counter{0};
  tmp_ = str_cat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) io_error(kind_, path_, str_cat("open('", tmp_, "')"), errno);
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(kind_, path_, str_cat("write('", tmp_, "')"), errno);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::write_zeros(size_t size) {
  static const uint8_t zeros[256] = {};
  while (size > 0) {
    const size_t n = std::min(size, sizeof(zeros));
    write(zeros, n);
    size -= n;
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) io_error(kind_, path_, str_cat("fsync('", tmp_, "')"), errno);
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) io_error(kind_, path_, str_cat("close('", tmp_, "')"), errno);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) io_error(kind_, path_, str_cat("rename('", tmp_, "')"), errno);
  committed_ = true;
  fsync_directory(kind_, path_);
}

FileReader::FileReader(const std::string& path, const std::string& kind) : path_(path), kind_(kind) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) io_error(kind_, path_, "open", errno);
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    io_error(kind_, path_, "fstat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw_error(Status::kIo, str_cat(kind_, " '", path_, "': not a regular file"));
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void FileReader::read_at(uint64_t offset, void* out, size_t size) const {
  auto* p = static_cast<uint8_t*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd_, p, std::min<size_t>(size, size_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) io_error(kind_, path_, "read", errno);
    COHORT_CHECK(n > 0, Status::kCorrupt, kind_, " '", path_, "': truncated (the file shrank while it was read)");
    p += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
}

}  // namespace cohort
