// safetensors (8-byte little-endian header length, JSON header, flat data buffer). Everything
// in the header is untrusted: offsets are checked against the buffer, the tensors must tile it
// exactly (no overlaps, no holes), and duplicate names - which nlohmann would silently collapse
// to the last one - are caught while parsing.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/io/files.h"
#include "engine/io/weights.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; add a byte swap");

namespace cnnrun {

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxHeader = 100'000'000;

int64_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> dims;
  int64_t begin = 0, end = 0;
  bool keep = true;
};

}  // namespace

std::map<std::string, Tensor> read_safetensors(const std::string& file, bool skip_batch_counters) {
  InputFile in(file);
  const int64_t size = in.size();
  if (size < 8) fail_file(file, -1, "too short for a safetensors file (" + std::to_string(size) + " bytes)");

  // The header first: its length and its tensors are checked before the data buffer is read, so
  // a file that is not safetensors (or lies about its sizes) costs nothing to refuse.
  unsigned char len8[8];
  in.read_exact_at(0, len8, 8);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | len8[i];
  if (hlen > static_cast<uint64_t>(kMaxHeader))
    fail_file(file, 0,
              "header length " + std::to_string(hlen) +
                  " is over the 100 MB limit (is this a safetensors file? it starts with 8 bytes of "
                  "little-endian header length, then a JSON object)");
  if (static_cast<int64_t>(hlen) > size - 8)
    fail_file(file, 0,
              "header length " + std::to_string(hlen) + " runs past the end of the file (" +
                  std::to_string(size) + " bytes)");
  const int64_t data_start = 8 + static_cast<int64_t>(hlen);
  const int64_t buffer = size - data_start;
  std::string header(static_cast<size_t>(hlen), '\0');
  in.read_exact_at(8, &header[0], static_cast<int64_t>(hlen));

  std::vector<std::set<std::string>> keys;
  std::string dup;
  auto cb = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (ev == json::parse_event_t::key) {
      const std::string& k = parsed.get_ref<const std::string&>();
      if (!keys.empty() && !keys.back().insert(k).second && dup.empty()) dup = k;
    }
    return true;
  };
  json hdr;
  try {
    hdr = json::parse(header.begin(), header.end(), cb);
  } catch (const json::exception& e) {
    fail_file(file, 8, std::string("header is not valid JSON: ") + e.what());
  }
  if (!dup.empty()) fail_file(file, 8, "header names '" + dup + "' twice");
  if (!hdr.is_object()) fail_file(file, 8, "header is not a JSON object");

  std::vector<Entry> entries;
  for (auto it = hdr.begin(); it != hdr.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail_file(file, 8, "__metadata__ is not an object");
      continue;
    }
    auto bad = [&](const std::string& what) { fail_file(file, 8, "tensor '" + name + "': " + what); };
    if (!v.is_object()) bad("expected an object with dtype, shape and data_offsets");
    for (auto k = v.begin(); k != v.end(); ++k)
      if (k.key() != "dtype" && k.key() != "shape" && k.key() != "data_offsets")
        bad("unknown key '" + k.key() + "'");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing or non-string 'dtype'");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing or non-array 'shape'");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("'data_offsets' must be [begin, end]");
    Entry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    int64_t esize = dtype_size(e.dtype);
    if (esize == 0) bad("unknown dtype '" + e.dtype + "'");
    if (e.dtype != "F32") {
      if (skip_batch_counters && ends_with(name, "num_batches_tracked"))
        e.keep = false;
      else
        bad("dtype " + e.dtype + " is not supported; only F32 tensors can be loaded (convert with .float())");
    }
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer()) bad("shape " + v["shape"].dump() + " holds a non-integer");
      if (d.is_number_unsigned() ? d.get<uint64_t>() > (uint64_t{1} << 62) : d.get<int64_t>() < 0)
        bad("shape " + v["shape"].dump() + " has a negative or absurd dimension");
      e.dims.push_back(d.get<int64_t>());
    }
    int64_t elems = 0, nbytes = 0;
    try {
      elems = numel_of(e.dims);
      nbytes = checked_mul(elems, esize, "tensor bytes");
    } catch (const Error&) {
      bad("shape " + v["shape"].dump() + " overflows");
    }
    for (const auto& o : v["data_offsets"])
      if (!o.is_number_unsigned() || o.get<uint64_t>() > static_cast<uint64_t>(buffer))
        bad("data_offsets " + v["data_offsets"].dump() + " lie outside the " + std::to_string(buffer) +
            "-byte data buffer");
    e.begin = v["data_offsets"][0].get<int64_t>();
    e.end = v["data_offsets"][1].get<int64_t>();
    if (e.end < e.begin) bad("data_offsets " + v["data_offsets"].dump() + " end before they begin");
    if (e.end - e.begin != nbytes)
      bad("shape " + dims_str(e.dims) + " of " + e.dtype + " needs " + std::to_string(nbytes) +
          " bytes, data_offsets " + v["data_offsets"].dump() + " give " + std::to_string(e.end - e.begin));
    entries.push_back(std::move(e));
  }

  // The tensors must tile the buffer: sorted by offset, each starts where the previous ended.
  std::vector<const Entry*> order;
  for (const auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  int64_t pos = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : order) {
    if (e->begin < pos)
      fail_file(file, data_start + e->begin,
                "tensor '" + e->name + "' overlaps tensor '" + prev->name + "' in the data buffer");
    if (e->begin > pos)
      fail_file(file, data_start + pos,
                "hole of " + std::to_string(e->begin - pos) + " bytes in the data buffer before tensor '" +
                    e->name + "'");
    pos = e->end;
    prev = e;
  }
  if (pos != buffer)
    fail_file(file, data_start + pos,
              std::to_string(buffer - pos) + " bytes in the data buffer belong to no tensor");

  std::map<std::string, Tensor> out;
  for (const auto& e : entries) {
    if (!e.keep) continue;
    Tensor t(e.dims);
    // An empty tensor's vector has no storage: a read into null is undefined even for 0 bytes.
    if (e.end > e.begin) in.read_exact_at(data_start + e.begin, t.data.data(), e.end - e.begin);
    for (size_t i = 0; i < t.data.size(); ++i)
      if (!std::isfinite(t.data[i]))
        fail_file(file, data_start + e.begin + 4 * static_cast<int64_t>(i),
                  "tensor '" + e.name + "' element " + std::to_string(i) + " is " +
                      (std::isnan(t.data[i]) ? "NaN" : "infinite"));
    out.emplace(e.name, std::move(t));
  }
  return out;
}

std::string safetensors_bytes(const std::map<std::string, Tensor>& tensors) {
  json hdr = json::object();
  int64_t off = 0;
  for (const auto& kv : tensors) {
    const Tensor& t = kv.second;
    if (numel_of(t.dims) != t.numel())
      throw Error("safetensors: tensor '" + kv.first + "' has dims " + t.dims_str() + " but " +
                  std::to_string(t.numel()) + " values");
    int64_t nbytes = checked_mul(t.numel(), 4, "tensor bytes");
    hdr[kv.first] = {{"dtype", "F32"}, {"shape", t.dims}, {"data_offsets", {off, off + nbytes}}};
    off = checked_add(off, nbytes, "safetensors size");
  }
  std::string h = hdr.dump();
  h.append((8 - h.size() % 8) % 8,
           ' ');  // keeps the data buffer 8-byte aligned, as the reference writer does
  std::string out;
  out.reserve(static_cast<size_t>(8 + static_cast<int64_t>(h.size()) + off));
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& kv : tensors)
    out.append(reinterpret_cast<const char*>(kv.second.data.data()), kv.second.data.size() * sizeof(float));
  return out;
}

void write_safetensors(const std::string& file, const std::map<std::string, Tensor>& tensors) {
  std::string bytes = safetensors_bytes(tensors);
  std::ofstream f(file, std::ios::binary | std::ios::trunc);
  if (!f) throw Error(file + ": cannot create: " + std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) throw Error(file + ": write failed");
}

}  // namespace cnnrun
