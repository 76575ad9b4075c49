// Hardening regressions through the cnnrun binary: every case of tests/regress/cases.txt (a bad
// netdef, weights or data file) must end with exit status 1 (or 2), nothing on stdout and exactly
// one line on stderr, "cnnrun: ...", naming the file and saying what was expected. In a sanitizer
// build the binary is sanitized too, so a crash, leak or undefined behaviour on the way fails here.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "engine/io/npy.h"
#include "tests/test_util.h"

using namespace cnnrun::test;
namespace fs = std::filesystem;

namespace {

std::string regress_dir() { return std::string(CNNRUN_SOURCE_DIR) + "/tests/regress"; }

struct Case {
  int line = 0;
  std::string name, args, file, fragment;
  int rc = 0;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

std::vector<Case> read_cases() {
  std::istringstream in(read_file(regress_dir() + "/cases.txt"));
  std::vector<Case> cases;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    if (trim(text).empty() || trim(text)[0] == '#') continue;
    std::vector<std::string> f;
    size_t start = 0;
    for (int k = 0; k < 4; ++k) {  // the fragment (last field) may itself hold a '|'
      size_t bar = text.find('|', start);
      if (bar == std::string::npos) break;
      f.push_back(trim(text.substr(start, bar - start)));
      start = bar + 1;
    }
    f.push_back(trim(text.substr(start)));
    INFO("cases.txt:" << line << ": " << text);
    REQUIRE(f.size() == 5);
    Case c;
    c.line = line;
    c.name = f[0];
    c.args = replace_all(f[1], "{R}", regress_dir());
    c.rc = std::stoi(f[2]);
    c.file = f[3];
    c.fragment = f[4];
    REQUIRE(!c.fragment.empty());
    cases.push_back(c);
  }
  return cases;
}

struct Result {
  int rc;
  std::string out, err;
};

// stdout goes to a file, stderr alone to the pipe. CNNRUN_ASSETS is unset so that the path cases
// see only the netdef's own directory (and /usr/share/datasets) as roots.
Result run_cnnrun(const std::string& args, const std::string& tmp) {
  Result r;
  r.rc = run_command(
      "{ env -u CNNRUN_ASSETS " + std::string(CNNRUN_BINARY) + " " + args + " >" + tmp + "/stdout; }",
      &r.err);
  r.out = read_file(tmp + "/stdout");
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("regress: every bad input of tests/regress/cases.txt fails with one line naming the file") {
  std::vector<Case> cases = read_cases();
  REQUIRE(cases.size() >= 100);
  std::string tmp = temp_dir("regress");
  std::set<std::string> names;
  for (const Case& c : cases) {
    INFO("case '" << c.name << "' (tests/regress/cases.txt:" << c.line << "): cnnrun " << c.args);
    CHECK_MESSAGE(names.insert(c.name).second, "duplicate case name");
    Result r = run_cnnrun(c.args, tmp);
    INFO("exit " << r.rc << ", stderr: " << r.err << "stdout: " << r.out);
    CHECK(r.rc == c.rc);
    CHECK(r.rc != 0);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK((!r.err.empty() && r.err.back() == '\n'));
    CHECK(r.err.rfind("cnnrun: ", 0) == 0);
    // The file as typed, or its real path (netdef paths are resolved before they are read).
    std::string typed = c.file[0] == '/' ? c.file : regress_dir() + "/" + c.file;
    std::error_code ec;
    std::string real = fs::weakly_canonical(typed, ec).string();
    CHECK_MESSAGE((contains(r.err, typed) || contains(r.err, real)), "the message does not name " << typed);
    CHECK_MESSAGE(contains(r.err, c.fragment), "expected the fragment: " << c.fragment);
  }
}

TEST_CASE("regress: the base nets run with their good files, so each case fails on its own file") {
  std::string R = regress_dir(), tmp = temp_dir("regress-ok");
  for (const std::string& args : {R + "/nets/fc.yaml --quiet --data " + R + "/cifar10/ok.bin",
                                  R + "/nets/idx.yaml --quiet --data " + R + "/idx/ok-images-idx3-ubyte," +
                                      R + "/idx/ok-labels-idx1-ubyte",
                                  R + "/nets/idx.yaml --quiet --data " + R + "/idx/ok-images-idx3-ubyte.gz," +
                                      R + "/idx/ok-labels-idx1-ubyte",
                                  "convert " + R + "/nets/bn.yaml " + tmp + "/bn.safetensors",
                                  "convert " + R + "/nets/cnj_conv.yaml " + tmp + "/c.safetensors",
                                  "convert " + R + "/nets/cnj_fc.yaml " + tmp + "/f.safetensors"}) {
    INFO("cnnrun " << args);
    Result r = run_cnnrun(args, tmp);
    INFO("stderr: " << r.err);
    CHECK(r.rc == 0);
    CHECK(r.err.empty());
  }
  // The generated weights get exactly one of idx/ok's three images right: a fixed answer that
  // changes if a loader reads these files differently.
  Result r = run_cnnrun(R + "/nets/idx.yaml --quiet --data " + R + "/idx/ok-images-idx3-ubyte," + R +
                            "/idx/ok-labels-idx1-ubyte",
                        tmp);
  CHECK(r.out == "accuracy 33.33 % (1/3)\n");
}

TEST_CASE("regress: every regression file is used by a case, and generate.py still writes them") {
  std::string R = regress_dir();
  std::string all;
  for (const Case& c : read_cases()) all += c.args + "\n" + R + "/" + c.file + "\n";
  for (const char* sub : {"netdef", "safetensors", "convnetjs", "cifar10", "idx", "onnx"})
    for (const auto& e : fs::recursive_directory_iterator(R + "/" + sub)) {
      if (!e.is_regular_file()) continue;
      std::string p = e.path().string();
      if (contains(p, "/ok")) continue;  // the good companions of the bad files
      CHECK_MESSAGE(contains(all, p), p << " is used by no case in cases.txt");
    }

  std::string tmp = temp_dir("regress-gen");
  std::string out;
  int rc = run_command("python3 " + R + "/generate.py " + tmp, &out);
  if (rc == 127) {
    MESSAGE("python3 not found: the comparison with generate.py is skipped");
    return;
  }
  REQUIRE_MESSAGE(rc == 0, out);
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(tmp)) {
    if (!e.is_regular_file()) continue;
    std::string rel = fs::relative(e.path(), tmp).string();
    INFO(rel);
    CHECK(read_file(R + "/" + rel) == read_file(e.path().string()));
    ++files;
  }
  CHECK(files > 50);
}

TEST_CASE("regress: a CIFAR-10 data set larger than memory is refused before it is allocated") {
  // A sparse file: 2^32 records (13 TB) claimed, no disk used. Not committed, so made here.
  std::string tmp = temp_dir("regress-sparse"), big = tmp + "/big.bin";
  write_file(big, "");
  std::error_code ec;
  fs::resize_file(big, uint64_t{3073} << 32, ec);
  if (ec) {
    MESSAGE("this file system cannot hold a 13 TB sparse file (" << ec.message() << "): skipped");
    return;
  }
  Result r = run_cnnrun(regress_dir() + "/nets/fc.yaml --data " + big, tmp);
  fs::remove(big, ec);
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(contains(r.err, big));
  CHECK(contains(r.err,
                 "4294967296 images; the 4294967296 this run reads = 13194139533312 bytes, more than the "
                 "host memory ("));
}

TEST_CASE("regress: a .npy header whose shape overflows the byte count is refused") {
  // 2^62 x 4 floats is 2^66 bytes: unchecked, the byte count wraps to 0 and matches an empty body.
  std::string tmp = temp_dir("regress-npy"), path = tmp + "/big.npy";
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size()) + '\0' + h;
  write_file(path, bytes);
  std::vector<int64_t> dims;
  std::string what;
  try {
    cnnrun::read_npy(path, &dims);
  } catch (const cnnrun::Error& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(contains(what, path + ": byte 10: shape [4611686018427387904, 4]: size overflow"));
}
