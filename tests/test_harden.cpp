// Hardening (issue 16) through the cnnrun binary, for what tests/regress/cases.txt cannot hold:
// outputs (which files survive a run, which are refused), inputs that are FIFOs or devices made
// at test time, and runs under resource limits. The net is tests/regress/nets/fc.yaml over
// cifar10/ok.bin (one record), so each run takes milliseconds.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "engine/core/error.h"
#include "engine/core/memory.h"
#include "engine/executor.h"
#include "engine/gpu_api.h"
#include "engine/io/files.h"
#include "engine/io/npy.h"
#include "engine/io/weights.h"
#include "engine/validate.h"
#include "reference/cpu_executor.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::test;
namespace fs = std::filesystem;

namespace {

std::string R() { return std::string(CNNRUN_SOURCE_DIR) + "/tests/regress"; }

struct Res {
  int rc;
  std::string out, err;
};

// stdout to a file, stderr alone to the pipe. `timeout` only guards the suite against the hang
// a FIFO input used to cause: a case that needs it fails on its exit status (124).
Res run_cli(const std::string& args, const std::string& tmp, const std::string& redirect = "",
            const std::string& prefix = "") {
  Res r;
  // timeout is only a hang guard (these runs take about a second): never a speed threshold.
  r.rc = run_command("{ " + prefix + "timeout 600 " + std::string(CNNRUN_BINARY) + " " + args + " " +
                         (redirect.empty() ? ">" + tmp + "/stdout" : redirect) + "; }",
                     &r.err);
  r.out = redirect.empty() ? read_file(tmp + "/stdout") : "";
  return r;
}

// A private copy of the base net, its weights and data, so the tests may link and replace them.
std::string copy_net(const std::string& tmp) {
  for (const char* f : {"fc.yaml", "fc.safetensors"}) fs::copy_file(R() + "/nets/" + f, tmp + "/" + f);
  fs::copy_file(R() + "/cifar10/ok.bin", tmp + "/ok.bin");
  return tmp + "/fc.yaml --data " + tmp + "/ok.bin --quiet";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int one_line(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

// Names in `dir` other than `keep`: a temporary file left behind shows up here.
std::vector<std::string> others(const std::string& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), n) == keep.end()) out.push_back(n);
  }
  return out;
}

}  // namespace

TEST_CASE("harden: the GPU engine's page-locked host buffers are sized to the host memory budget") {
  // images_fitting: the block the GPU engine keeps when each of its streams pins per_image bytes
  // per image (predictions, output values, pixel staging) within half of host_memory().
  CHECK(images_fitting(100, 3, 1000) == 3);
  CHECK(images_fitting(100, 3, 299) == 0);  // not one image on every stream: the run is an error
  CHECK(images_fitting(150528 + 4 + 4000, 3, int64_t{1} << 30) == 2316);  // ResNet-18 at 224, 1000 outputs
  CHECK(images_fitting(1, 1, INT64_MAX) == INT64_MAX);
  CHECK(images_fitting(0, 3, 1000) == 0);
  CHECK(images_fitting(100, 0, 1000) == 0);
  CHECK(images_fitting(100, 3, -1) == 0);
}

TEST_CASE("harden: an output never replaces a file the run read, whatever path names it") {
  std::string tmp = temp_dir("harden-inputs"), args = copy_net(tmp);
  const std::string data = read_file(tmp + "/ok.bin"), weights = read_file(tmp + "/fc.safetensors");
  fs::create_hard_link(tmp + "/ok.bin", tmp + "/hard.bin");
  fs::create_symlink(tmp + "/fc.safetensors", tmp + "/link.safetensors");
  fs::create_directory(tmp + "/sub");
  struct Case {
    std::string args, victim;
  };
  for (const Case& c : {
           Case{args + " --json " + tmp + "/hard.bin", "data (a hard link)"},
           Case{args + " --dump " + tmp + "/link.safetensors", "weights the netdef names (a symlink)"},
           Case{args + " --json " + tmp + "/sub/../fc.yaml", "the netdef (through ..)"},
           Case{tmp + "/fc.yaml --quiet --data " + tmp + "/ok.bin," + tmp + "/hard.bin --json " + tmp +
                    "/ok.bin",
                "a member of a --data list"},
           Case{"convert " + tmp + "/fc.yaml " + tmp + "/link.safetensors", "convert's input"},
       }) {
    INFO(c.victim << ": cnnrun " << c.args);
    Res r = run_cli(c.args, tmp);
    INFO(r.err);
    CHECK(r.rc == 1);
    CHECK(one_line(r.err) == 1);
    CHECK(contains(r.err, "refusing to overwrite an input file with an output"));
    CHECK(r.out.empty());
    CHECK(read_file(tmp + "/ok.bin") == data);
    CHECK(read_file(tmp + "/fc.safetensors") == weights);
    CHECK(fs::is_symlink(tmp + "/link.safetensors"));
  }
  // A ConvNetJS file inside a weights directory, named through another directory's link.
  fs::create_directory(tmp + "/cnj");
  fs::copy_file(R() + "/nets/cnj_fc.yaml", tmp + "/cnj/cnj_fc.yaml");
  fs::copy_file(R() + "/nets/f.txt", tmp + "/cnj/f.txt");
  fs::create_symlink(tmp + "/cnj/f.txt", tmp + "/sub/out.safetensors");
  const std::string text = read_file(tmp + "/cnj/f.txt");
  Res r = run_cli("convert " + tmp + "/cnj/cnj_fc.yaml " + tmp + "/sub/out.safetensors", tmp);
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "refusing to overwrite an input file"));
  CHECK(read_file(tmp + "/cnj/f.txt") == text);
}

TEST_CASE("harden: devices, FIFOs and stdout are written in place, never replaced") {
  std::string tmp = temp_dir("harden-devices"), args = copy_net(tmp);
  Res r = run_cli(args + " --json /dev/null --dump /dev/null", tmp);
  INFO(r.err);
  CHECK(r.rc == 1);  // one file named twice
  CHECK(contains(r.err, "--json /dev/null: names the same file as --dump /dev/null"));

  r = run_cli(args + " --json /dev/null", tmp);
  INFO(r.err);
  CHECK(r.rc == 0);
  struct stat st;
  REQUIRE(::stat("/dev/null", &st) == 0);
  CHECK(S_ISCHR(st.st_mode));

  // stdout redirected to a file: /dev/stdout is that file, and the JSON lands after the report.
  r = run_cli(args + " --json /dev/stdout", tmp);
  INFO(r.err);
  CHECK(r.rc == 0);
  CHECK(r.out.rfind("accuracy ", 0) == 0);
  CHECK(contains(r.out, "\"images\": 1"));
  CHECK(others(tmp, {"fc.yaml", "fc.safetensors", "ok.bin", "stdout"}).empty());

  // A FIFO gets the bytes through its reader; the FIFO itself stays.
  REQUIRE(::mkfifo((tmp + "/fifo").c_str(), 0600) == 0);
  std::string got;
  REQUIRE(run_command("{ cat " + tmp + "/fifo > " + tmp + "/from-fifo & " + std::string(CNNRUN_BINARY) + " " +
                          args + " --json " + tmp + "/fifo > /dev/null; wait; }",
                      &got) == 0);
  CHECK(contains(read_file(tmp + "/from-fifo"), "\"images\": 1"));
  REQUIRE(::lstat((tmp + "/fifo").c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
}

TEST_CASE("harden: a planted link at a temporary name is never followed; outputs keep permissions") {
  std::string tmp = temp_dir("harden-tmp"), args = copy_net(tmp);
  write_file(tmp + "/victim", "keep me");
  // The fixed temporary name earlier versions wrote through.
  fs::create_symlink(tmp + "/victim", tmp + "/r.json.tmp-cnnrun");
  write_file(tmp + "/r.json", "old");
  fs::permissions(tmp + "/r.json", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  Res r = run_cli(args + " --json " + tmp + "/r.json", tmp);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(read_file(tmp + "/victim") == "keep me");
  CHECK(contains(read_file(tmp + "/r.json"), "\"images\": 1"));
  CHECK(fs::status(tmp + "/r.json").permissions() ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
  CHECK(
      others(tmp, {"fc.yaml", "fc.safetensors", "ok.bin", "stdout", "victim", "r.json", "r.json.tmp-cnnrun"})
          .empty());
  // A link to a regular file: the file it names is replaced, the link stays a link.
  fs::create_symlink(tmp + "/r.json", tmp + "/link.json");
  r = run_cli(args + " --json " + tmp + "/link.json", tmp);
  CHECK(r.rc == 0);
  CHECK(fs::is_symlink(tmp + "/link.json"));
  CHECK(contains(read_file(tmp + "/r.json"), "\"images\": 1"));
}

TEST_CASE("harden: outputs are all written or none, and bad output paths fail before the run") {
  std::string tmp = temp_dir("harden-allornone"), args = copy_net(tmp);
  // /dev/full takes the JSON and fails: the .npy, complete by then, must not appear.
  Res r = run_cli(args + " --dump " + tmp + "/p.npy --json /dev/full", tmp);
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(one_line(r.err) == 1);
  CHECK(contains(r.err, "--json /dev/full: write failed"));
  CHECK(!fs::exists(tmp + "/p.npy"));
  CHECK(others(tmp, {"fc.yaml", "fc.safetensors", "ok.bin", "stdout"}).empty());

  // A report to a full stdout is an error too, and then no output file is written either.
  r = run_cli(args + " --dump " + tmp + "/p.npy", tmp, "> /dev/full");
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "cnnrun: standard output: write failed"));
  CHECK(!fs::exists(tmp + "/p.npy"));

  // Unwritable outputs are refused before anything is read: the missing data file is not the
  // error.
  for (const std::string& out : {tmp + "/nodir/r.json", tmp + "/ok.bin/r.json", tmp}) {
    r = run_cli(tmp + "/fc.yaml --data " + tmp + "/missing.bin --json " + out, tmp);
    INFO(out << ": " << r.err);
    CHECK(r.rc == 1);
    CHECK(one_line(r.err) == 1);
    CHECK(contains(r.err, "--json " + out + ": "));
    CHECK(!contains(r.err, "missing.bin"));
  }
  r = run_cli(args + " --json ''", tmp);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--json: empty file name"));
  r = run_cli(args + " --assets ''", tmp);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--assets: empty directory name"));
  r = run_cli(args + " --json " + tmp + "/same --dump " + tmp + "/./same", tmp);
  CHECK(r.rc == 1);
  CHECK(contains(r.err, "names the same file as --dump"));
}

TEST_CASE("harden: a FIFO or a device as an input is refused at once, never read") {
  std::string tmp = temp_dir("harden-fifo"), args = copy_net(tmp);
  REQUIRE(::mkfifo((tmp + "/net.yaml").c_str(), 0600) == 0);
  REQUIRE(::mkfifo((tmp + "/w.json").c_str(), 0600) == 0);
  struct Case {
    std::string args, file, what;
  };
  for (const Case& c :
       {Case{tmp + "/net.yaml", tmp + "/net.yaml", "is a FIFO, not a regular file"},
        Case{args + " --weights " + tmp + "/w.json", tmp + "/w.json", "is a FIFO, not a regular file"},
        Case{args + " --weights /dev/zero", "/dev/zero", "is a character device, not a regular file"},
        Case{args + " --weights " + tmp + "/fifo-data", tmp + "/fifo-data", "no such file"},
        Case{args + " --weights " + tmp + "/sub.json", tmp + "/sub.json", "is a directory"},
        Case{"/dev/zero", "/dev/zero", "is a character device, not a regular file"}}) {
    if (c.file == tmp + "/sub.json") fs::create_directory(c.file);
    Res r = run_cli(c.args, tmp);
    INFO("cnnrun " << c.args << ": " << r.err);
    CHECK(r.rc == 1);  // 124 would be the hang
    CHECK(one_line(r.err) == 1);
    CHECK(contains(r.err, c.file));
    CHECK(contains(r.err, c.what));
  }
}

TEST_CASE("harden: InputFile and OutputFiles in the library") {
  forget_inputs();
  std::string tmp = temp_dir("harden-lib");
  write_file(tmp + "/in.txt", "abc");
  {
    InputFile f(tmp + "/in.txt");
    CHECK(f.size() == 3);
    CHECK(f.read_all(3, "3 bytes", "x") == "abc");
  }
  CHECK_THROWS_WITH_AS(InputFile(tmp + "/in.txt").read_all(2, "2 bytes", "too long"),
                       (tmp + "/in.txt: over 2 bytes; too long").c_str(), Error);
  FileId id;
  REQUIRE(file_id(tmp + "/in.txt", &id));
  CHECK(is_opened_input(id));
  CHECK_THROWS_WITH_AS(
      write_output_file(tmp + "/in.txt", "x", {}),
      (tmp + "/in.txt: refusing to overwrite an input file with an output (it is a file this "
             "run reads)")
          .c_str(),
      Error);
  forget_inputs();
  write_output_file(tmp + "/in.txt", "xyz", {});
  CHECK(read_file(tmp + "/in.txt") == "xyz");
  // An OutputFiles destroyed before commit leaves nothing behind.
  {
    OutputFiles o;
    o.set(o.add("--a", tmp + "/a"), "1");
    o.set(o.add("--b", tmp + "/b"), "2");
  }
  CHECK(!fs::exists(tmp + "/a"));
  // A failure before publishing leaves every target as it was.
  {
    OutputFiles o;
    o.set(o.add("--a", tmp + "/a"), "1");
    o.set(o.add("--b", tmp + "/in.txt"), "2");
    CHECK_THROWS_AS(o.commit([] { throw Error("stdout failed"); }), Error);
  }
  CHECK(!fs::exists(tmp + "/a"));
  CHECK(read_file(tmp + "/in.txt") == "xyz");
  CHECK(others(tmp, {"in.txt"}).empty());
}

TEST_CASE("harden: --block far beyond the run runs every image in one block") {
  std::string tmp = temp_dir("harden-block");
  const std::string args = R() + "/nets/idx.yaml --quiet --data " + R() + "/idx/ok-images-idx3-ubyte," + R() +
                           "/idx/ok-labels-idx1-ubyte --dump " + tmp + "/p.npy";
  for (const char* block : {"9223372036854775807", "4611686018427387904", "2"}) {
    Res r = run_cli(args + " --block " + block, tmp);
    INFO("--block " << block << ": " << r.err);
    CHECK(r.rc == 0);
    CHECK(r.out == "accuracy 33.33 % (1/3)\n");  // the fixed answer of the base net (test_regress)
    std::vector<int64_t> dims;
    std::vector<float> p = read_npy(tmp + "/p.npy", &dims);
    CHECK(dims == std::vector<int64_t>{3, 10});
    CHECK(std::any_of(p.begin(), p.end(), [](float x) { return x != 0; }));
  }
}

TEST_CASE("harden: validate() names the first layer giving NaN or infinity, not a later one") {
  // fc1's weights of 3e38 overflow to infinity; fc2 then gives NaN (inf - inf). Both executors
  // are the reference, so no layer merely differs: the non-finite one must be named.
  Network net = parse_netdef_string(
      "input: {channels: 1, height: 1, width: 2}\nclasses: [a, b]\n"
      "layers:\n  - {name: fc1, type: fc, outputs: 2}\n  - {name: fc2, type: fc, outputs: 2}\n");
  auto& fc1 = *net.layers[0];
  auto& fc2 = *net.layers[1];
  fc1.weights["weight"] = Tensor({2, 2});
  fc1.weights["weight"].data = {3e38f, 3e38f, 1.f, 1.f};
  fc1.weights["bias"] = Tensor({2});
  fc2.weights["weight"] = Tensor({2, 2});
  fc2.weights["weight"].data = {1.f, -1.f, 1.f, 1.f};
  fc2.weights["bias"] = Tensor({2});
  Dataset d;
  d.count = 2;
  d.shape = {1, 1, 2};
  d.pixels = {255, 255, 0, 0};
  d.labels = {0, 1};
  auto a = make_cpu_executor(net), b = make_cpu_executor(net);
  Validation v = validate(*a, *b, net, d, 2);
  CHECK(!v.pass);
  CHECK(v.nonfinite);
  CHECK(v.first_failure == "fc1");
  CHECK(first_nonfinite_layer(*a, net, d, 2, RunOptions{}) == "fc1");
  RunOptions ro;
  ro.batch = 2;
  RunResult r = a->run(d, ro);
  CHECK(r.nonfinite_images == 1);  // image 1 is all zeros: 0 * 3e38 stays finite
}

namespace {

// A net whose one layer is far larger per image than the rest: 60000 1x1 filters over 3x32x32
// give 246 MB per image, with weights of a few MB written here (not committed).
std::string wide_net(const std::string& tmp) {
  const int64_t F = 60000;
  write_file(
      tmp + "/wide.yaml",
      "input: {channels: 3, height: 32, width: 32}\nclasses: [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9]\n"
      "weights: {format: safetensors, path: wide.safetensors}\nlayers:\n"
      "  - {name: wide, type: conv, filters: " +
          std::to_string(F) +
          ", kernel: 1}\n  - {name: gap, type: avgpool, global: true}\n"
          "  - {name: fc, type: fc, outputs: 10}\n");
  std::map<std::string, Tensor> t;
  t["wide.weight"] = Tensor({F, 3, 1, 1});
  t["wide.bias"] = Tensor({F});
  t["fc.weight"] = Tensor({10, F});
  t["fc.bias"] = Tensor({10});
  for (auto& kv : t) kv.second.data = random_floats(kv.second.data.size(), 16, -0.01f, 0.01f);
  write_file(tmp + "/wide.safetensors", safetensors_bytes(t));
  return tmp + "/wide.yaml --engine cpu --data " + R() + "/cifar10/ok.bin";
}

// The address space (KiB, for ulimit -v) the binary needs to start at all, found by trying in
// 32 MiB steps: a build with the GPU executor maps CUDA's libraries (cuBLASLt alone is 540 MB),
// a CPU-only build far less. -1 when it does not start under 4 GiB.
int64_t start_limit_kib(const std::string& tmp) {
  for (int64_t kib = 32 * 1024; kib <= 4 * 1024 * 1024; kib += 32 * 1024)
    if (run_cli("--version", tmp, "", "ulimit -v " + std::to_string(kib) + "; ").rc == 0) return kib;
  return -1;
}

}  // namespace

TEST_CASE("harden: under a 1 GiB address-space limit a run cuts its blocks or fails cleanly, never dies") {
  std::string tmp = temp_dir("harden-ulimit"), args = wide_net(tmp);
  // ulimit -v is in KiB. Beside what the binary needs to start, 768 MiB hold three 246 MB images
  // (1 GiB in all for a CPU-only build): the blocks are cut to fit and the run finishes with the
  // same answer as without the limit.
  const int64_t start = start_limit_kib(tmp);
  if (start < 0) {
    // A sanitizer build reserves terabytes of shadow memory at start: no address-space limit fits.
    MESSAGE(
        "the limited runs are left out: cnnrun does not start under a 4 GiB address-space limit "
        "(an ASan build)");
  } else {
    const std::string fits = std::to_string(std::max<int64_t>(start + 768 * 1024, 1024 * 1024));
    Res free_run = run_cli(args + " --quiet --batch 16 --cycle", tmp);
    INFO(free_run.err);
    REQUIRE(free_run.rc == 0);
    Res r = run_cli(args + " --batch 16 --cycle --threads 2", tmp, "> " + tmp + "/report.txt",
                    "ulimit -v " + fits + "; ");
    INFO(r.err);
    CHECK(r.rc == 0);
    const std::string report = read_file(tmp + "/report.txt");
    CHECK(contains(report, "to fit host memory"));
    CHECK(contains(report, "available by the address-space limit), blocks cut from 16 to"));
    CHECK(contains(report, free_run.out.substr(free_run.out.find('('))));  // same (correct/images)

    // 128 MiB beside what the binary needs to start cannot hold one image: one line naming the
    // layer and the bytes, exit 1.
    r = run_cli(args + " --quiet", tmp, "", "ulimit -v " + std::to_string(start + 128 * 1024) + "; ");
    INFO(r.err);
    CHECK(r.rc == 1);
    CHECK(one_line(r.err) == 1);
    CHECK(contains(r.err,
                   "cnnrun: host memory: one image needs 246.0 MB for its layer outputs (the largest, "
                   "layer 'wide' (conv), 245.8 MB)"));
    CHECK(contains(r.err, "by the address-space limit"));
  }

  // 2^62 cycled images: their predictions alone are more than any memory.
  Res r = run_cli(args + " --quiet --cycle --batch 4611686018427387904", tmp);
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(contains(r.err,
                 "--batch 4611686018427387904: the predictions of 4611686018427387904 images need more "
                 "than 2^63 bytes of host memory"));
}

TEST_CASE("harden: a run reads only the images it needs, however often a file is listed") {
  std::string tmp = temp_dir("harden-needs"), list;
  fs::copy_file(R() + "/cifar10/ok.bin", tmp + "/a");
  for (int i = 0; i < 3000; ++i) list += i ? ",a" : "a";
  Res r = run_cli(R() + "/nets/fc.yaml --batch 2 --data " + list, tmp, "", "cd " + tmp + " && ");
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "3000 files, 3000 images (the first 2 read)"));
  CHECK(contains(r.out, "Images: 2"));
}

TEST_CASE("harden: names from a netdef reach the terminal escaped and the JSON report as UTF-8") {
  std::string tmp = temp_dir("harden-names");
  fs::copy_file(R() + "/nets/idx.safetensors", tmp + "/idx.safetensors");
  // The net's name holds a terminal escape (clear screen, red), a layer's a Latin-1 byte (not UTF-8).
  write_file(tmp + "/n.yaml",
             "name: \"\\e[2J\\e[31mred\"\ninput: {channels: 1, height: 2, width: 2}\n"
             "classes: [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9]\n"
             "weights: {format: safetensors, path: idx.safetensors}\nlayers:\n"
             "  - {name: \"g\xe9\", type: avgpool, global: true}\n  - {name: fc, type: fc, outputs: 10}\n");
  const std::string data = R() + "/idx/ok-images-idx3-ubyte," + R() + "/idx/ok-labels-idx1-ubyte";
  Res r = run_cli(tmp + "/n.yaml --data " + data + " --json " + tmp + "/r.json", tmp);
  INFO(r.err);
  REQUIRE(r.rc == 0);
  CHECK(!contains(r.out, "\x1b"));
  CHECK(contains(r.out, "\\x1b[2J\\x1b[31mred"));
  CHECK(contains(r.out, "    g\\xe9 "));
  const std::string j = read_file(tmp + "/r.json");
  CHECK(contains(j, "\"g\xef\xbf\xbd\""));  // U+FFFD for the byte that is not UTF-8
  CHECK(contains(j, "\"images\": 3"));
}

TEST_CASE("gpu: harden: the GPU's argmax pass counts images whose output is not finite" *
          doctest::skip(!gpu_present())) {
  // The validate() net above: fc1's 3e38 weights overflow for image 0 (pixels 255) only. Cycled
  // to several blocks, so the count runs through the captured graphs and a shorter last block.
  Network net = parse_netdef_string(
      "input: {channels: 1, height: 1, width: 2}\nclasses: [a, b]\n"
      "layers:\n  - {name: fc1, type: fc, outputs: 2}\n  - {name: fc2, type: fc, outputs: 2}\n");
  net.layers[0]->weights["weight"] = Tensor({2, 2});
  net.layers[0]->weights["weight"].data = {3e38f, 3e38f, 1.f, 1.f};
  net.layers[0]->weights["bias"] = Tensor({2});
  net.layers[1]->weights["weight"] = Tensor({2, 2});
  net.layers[1]->weights["weight"].data = {1.f, -1.f, 1.f, 1.f};
  net.layers[1]->weights["bias"] = Tensor({2});
  Dataset d;
  d.count = 2;
  d.shape = {1, 1, 2};
  d.pixels = {255, 255, 0, 0};
  d.labels = {0, 1};
  auto gpu = make_gpu_executor(net);
  RunOptions ro;
  ro.batch = 1001;  // images 0, 2, ..., 1000 are image 0: 501 of them
  ro.cycle = true;
  ro.block = 100;
  RunResult r = gpu->run(d, ro);
  CHECK(r.nonfinite_images == 501);
  CHECK(first_nonfinite_layer(*gpu, net, d, 2, RunOptions{}) == "fc1");
  Validation v = validate(*gpu, *make_cpu_executor(net), net, d, 2);
  CHECK(v.nonfinite);
  CHECK(v.first_failure == "fc1");
  // A finite run counts nothing.
  d.pixels = {1, 1, 0, 0};
  r = gpu->run(d, ro);
  CHECK(r.nonfinite_images == 0);
}
