// data/h5.h: a thin, exception-safe layer over HDF5's C API: files, tensors as
// datasets, attributes. Run logs (data/runlog.h) and checkpoints build on it.
// HDF5's headers stay private to this layer: callers see plain C++ types.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace heed {

// What HDF5 itself refused while heed opened, read or wrote a file through
// this layer (a file it cannot open, a group, dataset or attribute it cannot
// read or write: a truncated or damaged file, a full disk). Every other error
// this layer passes on (memory that cannot be allocated for a tensor read, a
// FIFO given as a file, a dataset of text read as numbers) is a plain
// heed::Error: a reader that calls a file "damaged" does so on an H5Error only.
struct H5Error : Error {
  using Error::Error;
};

}  // namespace heed

namespace heed::h5 {

// An attribute value: text, integer, real number.
using Attr = std::variant<std::string, int64_t, double>;

class File {
 public:
  enum class Mode {
    // Truncate or create; latest file format (needed for SWMR). A file
    // another program has open through HDF5 (a reader such as h5py or heed
    // inspect holds HDF5's lock on it) is waited for a moment, then refused,
    // untouched: never truncated first (see kLockWait in h5.cpp).
    create,
    read,       // read-only
    read_swmr,  // read-only while a writer appends (single-writer/multiple-reader)
    append,     // read-write on an existing file (one another program holds: as create)
    // Read-only, whatever state a killed writer left: as a SWMR reader, else
    // plainly, else (a file still marked open for writing, e.g. killed while
    // a resume had it open before SWMR began) from a private copy with that
    // mark cleared (h5clear), removed on close. The file itself is never
    // changed. from_copy() tells which.
    read_any
  };
  File(const std::string& path, Mode mode);
  ~File();
  File(File&& o) noexcept;
  File& operator=(File&& o) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }
  bool from_copy() const { return !copy_.empty(); }  // read_any read a cleared copy
  int64_t id() const { return id_; }
  bool close();  // false when HDF5 could not write what it held (a full disk); closed either way
  // Forgets the file without another write to it, as a killed writer would:
  // after a failed write, closing would write the superblock's new end of
  // file over a file that holds less (readers then refuse it as truncated),
  // where an SWMR log left as it was reads up to its last flush.
  void abandon();

  bool exists(const std::string& object) const;  // a group, dataset or attribute path
  // Dataset paths under `group` (recursively), e.g. "params/0.weight".
  std::vector<std::string> list_datasets(const std::string& group = "/") const;

  // A fixed-size dataset holding t (created with intermediate groups).
  void write_tensor(const std::string& path, const Tensor& t);
  // Reads a dataset of float32/float64/int64 into a tensor of that dtype.
  Tensor read_tensor(const std::string& path) const;
  // The block of a dataset that starts at `start` and spans `count` along
  // each dimension (an HDF5 hyperslab), read as read_tensor reads the whole:
  // a tensor of shape `count`. Nothing else of the dataset is read.
  Tensor read_block(const std::string& path, const std::vector<int64_t>& start,
                    const std::vector<int64_t>& count) const;
  // Reads a numeric dataset in row-major order, in blocks of at most
  // max_bytes (at least one element each), handing each block to visit
  // flattened ([n] elements, the next n of the whole read_tensor would give):
  // a dataset of any size in bounded memory.
  void read_in_blocks(const std::string& path, int64_t max_bytes,
                      const std::function<void(const Tensor& block)>& visit) const;
  // The dtype read_tensor gives a numeric dataset: f32, f64 or i64.
  DType dataset_dtype(const std::string& path) const;
  // Whether a dataset holds numbers (floats or integers: read_tensor reads it).
  bool is_numeric(const std::string& path) const;
  Shape dataset_shape(const std::string& path) const;

  void set_attr(const std::string& object, const std::string& name, const Attr& value);
  bool has_attr(const std::string& object, const std::string& name) const;
  void remove_attr(const std::string& object, const std::string& name);  // none there: nothing to do
  Attr get_attr(const std::string& object, const std::string& name) const;
  std::map<std::string, Attr> attrs(const std::string& object) const;

  // Single-writer/multiple-reader mode: after this, no object can be created,
  // but datasets can grow and readers see every flushed row.
  void start_swmr_write();
  void flush();

 private:
  std::string path_;
  int64_t id_ = -1;
  std::string copy_;  // read_any: the cleared copy it reads, removed on close
  // create: the descriptor holding this file's lock in HDF5's place until
  // start_swmr_write() (HDF5 drops its own then) or close(); -1: none.
  int lock_fd_ = -1;
  void unlock();
};

std::string attr_str(const Attr& a);  // for printing
// What a holds, for messages: "text", "an integer", "a real number".
std::string attr_kind(const Attr& a);
// a's value as a T (std::string, int64_t or double). When a holds another
// type, throws heed::Error naming it, e.g. with what = "checkpoint 'x.h5':
// tensor 'model/w': its crc32 attribute":
//   checkpoint 'x.h5': tensor 'model/w': its crc32 attribute is text ("abc"), expected an integer
template <class T>
T attr_as(const Attr& a, const std::string& what);

// Why the operating system will not open path (to read, or to read and write
// when for_writing): its own words ("Permission denied", "Too many levels of
// symbolic links", "No such file or directory"), or "Is a directory"; ""
// when it opens. An unreadable file then reads as what it is, not as a file
// without HDF5's signature. A FIFO is not waited on.
std::string open_problem(const std::string& path, bool for_writing = false);

// Whether path starts with HDF5's signature (at 0, 512, 1024, ...), so a file
// that fails to open can be told apart as damaged or as not HDF5 at all.
bool has_signature(const std::string& path);

// Turns HDF5's own error stack printing off once (heed reports errors itself).
void silence_errors();
// The operating system's reason for HDF5's last failure, from its error
// stack ("No space left on device"), or "" when it gave none.
std::string system_reason();

}  // namespace heed::h5
