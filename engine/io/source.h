// Data sources: what Executor::run is fed from. A format that fits in memory (CIFAR, IDX, .npy)
// is one Dataset, run whole; an image folder is a list of files that is decoded block by block
// on worker threads while the executor runs the block before, so a million-image folder never
// sits in memory and decoding overlaps the network's work (engine/stream.h runs the loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/io/dataset.h"

namespace cnnrun {

struct Network;
class AssetResolver;

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual int64_t count() const = 0;
  virtual Shape shape() const = 0;
  virtual bool labelled() const = 0;
  virtual std::string description() const = 0;
  // The whole data set when it is in memory (run at once, cycled, made resident); null when the
  // source can only be read in blocks.
  virtual const Dataset* whole() const { return nullptr; }
  // Images first..first+n-1 (inside 0..count()-1) into `out` (its buffers reused), with their
  // labels and paths. Called from one thread at a time; may use worker threads inside. A source
  // that skips unreadable images (skipped() counts them) returns fewer than n.
  virtual void read(int64_t first, int64_t n, Dataset& out) = 0;
  virtual int64_t skipped() const { return 0; }
  virtual std::string first_skipped() const { return ""; }  // the first skipped image's error
  // Seconds spent decoding so far, summed over the worker threads, and the threads used.
  virtual double decode_seconds() const { return 0; }
  virtual int decode_threads() const { return 0; }
};

// An in-memory data set as a source.
std::unique_ptr<DataSource> memory_source(Dataset data);

// What load_dataset reads, plus image folders (format "images"), which stream. `threads`: decode
// workers (0 = hardware concurrency); `skip_bad`: an image folder leaves out images that cannot
// be read (counted) instead of stopping at the first. `max_images` > 0: the in-memory formats
// read only max_images images (a run of --batch N needs no more); `first`: the source starts at
// that image of the files (a rank's shard), its image 0 being theirs `first`. An image folder
// with either lists only that part. `in_files`, when given, receives the images the files hold
// (all of them, whatever part is read).
std::unique_ptr<DataSource> open_data(const Network& net, const AssetResolver& assets,
                                      const std::string& override_path, const std::string& format,
                                      int threads, bool skip_bad = false, int64_t max_images = 0,
                                      int64_t first = 0, int64_t* in_files = nullptr);

}  // namespace cnnrun
