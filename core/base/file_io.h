// Durable file I/O shared by graph files and checkpoints: an atomically replaced output file and
// a positional reader. Every failure is a kIo error "<kind> '<path>': <call> failed: <strerror>",
// where kind names what the file is ("checkpoint", "graph file").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cohort {

// Written under "<path>.tmp.<pid>.<n>" in the same directory; commit() makes it path.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, const std::string& kind);  // creates the temporary file
  ~AtomicFile();                                 // without commit: closes and removes it
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write_zeros(size_t size);
  // fsync the file, close it, rename it over path, fsync the directory. After a throw before the
  // rename, path still holds its previous contents.
  void commit();

 private:
  std::string path_;
  std::string kind_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Reads ranges of a file opened once.
class FileReader {
 public:
  FileReader(const std::string& path, const std::string& kind);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly size bytes at offset; a short read (the file shrank) is kCorrupt "truncated".
  void read_at(uint64_t offset, void* out, size_t size) const;

 private:
  std::string path_;
  std::string kind_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace cohort
