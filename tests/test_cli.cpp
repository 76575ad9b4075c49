// End to end through the cnnrun binary: the thesis accuracy, two netdefs from one binary,
// the report, JSON and .npy outputs, convert, and one-line errors with non-zero exits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/executor.h"
#include "engine/io/assets.h"
#include "engine/io/npy.h"
#include "engine/io/weights.h"
#include "engine/layer.h"
#include "engine/network.h"
#include "tests/test_util.h"

using namespace cnnrun;
using namespace cnnrun::test;

namespace {

std::string cnnrun_cmd(const std::string& args) { return std::string(CNNRUN_BINARY) + " " + args; }
std::string src(const std::string& p) { return std::string(CNNRUN_SOURCE_DIR) + "/" + p; }
std::string assets() { return "--assets " + shared_dir(); }

struct Out {
  int rc;
  std::string text;
};
Out run(const std::string& args) {
  Out o;
  o.rc = run_command(cnnrun_cmd(args), &o.text);
  return o;
}
// The same with `env` (NAME=value) in the command's environment.
Out run_env(const std::string& env, const std::string& args) {
  Out o;
  o.rc = run_command("env " + env + " " + cnnrun_cmd(args), &o.text);
  return o;
}
size_t count_lines(const std::string& s) { return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("cli: the thesis network gives exactly 78.25 % on the first 1200 sample images (CPU)") {
  REQUIRE(have_file(shared_dir() + "/data/cifar10-sample/train_2000.bin"));
  Out o = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 1200");
  INFO(o.text);
  REQUIRE(o.rc == 0);
  CHECK(o.text.find("Net accuracy: 78.25 % (939/1200)") != std::string::npos);
  // The report gives every layer's time and the totals per type, as the thesis's did.
  for (const char* l : {"conv1", "relu2", "pool3", "fc", "softmax", "  conv:", "  maxpool:", "Load data time",
                        "Create network time", "Load network weights time", "Total time"})
    CHECK_MESSAGE(o.text.find(l) != std::string::npos, l);
  // Its arithmetic: the conv and fc layers' 3.92 M multiply-adds an image, and the rate.
  CHECK(o.text.find("Arithmetic: 3.920 M multiply-adds an image (the netdef's conv and fc layers), ") !=
        std::string::npos);
  CHECK(o.text.find("FLOP/s over the forward\n") != std::string::npos);
}

TEST_CASE("cli: --json, --dump and --quiet") {
  std::string dir = temp_dir("cli-json");
  Out o = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 100 --quiet --json " +
              dir + "/r.json --dump " + dir + "/p.npy");
  INFO(o.text);
  REQUIRE(o.rc == 0);
  CHECK(count_lines(o.text) == 1);
  auto j = nlohmann::json::parse(read_file(dir + "/r.json"));
  CHECK(j["images"] == 100);
  CHECK(j["layers"].size() == 11);
  CHECK(j["layers"][0]["name"] == "conv1");
  CHECK(j["correct"].get<int>() >= 0);
  CHECK(j["accuracy_percent"].get<double>() == doctest::Approx(j["correct"].get<double>()));
  CHECK(j["environment"]["engine"].get<std::string>().find("cpu") == 0);
  CHECK(j["multiply_adds_per_image"] == 3920000);
  // 2 x multiply-adds x images over the forward time
  CHECK(j["flops_per_s"].get<double>() ==
        doctest::Approx(2.0 * 3920000 * 100 / j["times"]["forward_s"].get<double>()).epsilon(1e-9));
  std::vector<int64_t> dims;
  std::vector<float> probs = read_npy(dir + "/p.npy", &dims);
  REQUIRE(dims == std::vector<int64_t>{100, 10});
  for (int i = 0; i < 100; ++i) {
    double s = 0;
    for (int k = 0; k < 10; ++k) s += probs[static_cast<size_t>(i * 10 + k)];
    CHECK(s == doctest::Approx(1.0).epsilon(1e-5));  // softmax rows
  }
}

TEST_CASE("cli: --progress always draws the bar, never and auto on a pipe draw none") {
  // The rule is asserted through the switch, never through how long a run takes: `auto`'s
  // one-second delay on a terminal is the only timed part and no case here depends on it.
  std::string args = src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 300";
  Out always = run(args + " --progress always");  // stderr is a pipe here
  INFO(always.text);
  REQUIRE(always.rc == 0);
  CHECK(always.text.find("] 300/300 images") != std::string::npos);
  CHECK(always.text.find("[########################################] 300/300 images") != std::string::npos);
  for (const char* mode : {"", " --progress auto", " --progress never"}) {
    Out o = run(args + mode);
    INFO(mode << ": " << o.text);
    REQUIRE(o.rc == 0);
    CHECK(o.text.find("/300 images") == std::string::npos);
  }
  // On a terminal (script(1) gives cnnrun a pseudo-terminal): `never` draws nothing there either,
  // and `always` draws it there too.
  std::string tty;
  REQUIRE(run_command("script -qec '" + cnnrun_cmd(args + " --progress never") + "' /dev/null", &tty) == 0);
  CHECK(tty.find("Net accuracy") != std::string::npos);
  CHECK(tty.find("/300 images") == std::string::npos);
  REQUIRE(run_command("script -qec '" + cnnrun_cmd(args + " --progress always") + "' /dev/null", &tty) == 0);
  CHECK(tty.find("] 300/300 images") != std::string::npos);
  // --quiet means no bar under `auto` (on a terminal too); `always` still draws it.
  REQUIRE(run_command("script -qec '" + cnnrun_cmd(args + " --quiet") + "' /dev/null", &tty) == 0);
  CHECK(tty.find("accuracy") != std::string::npos);
  CHECK(tty.find("/300 images") == std::string::npos);
  Out quiet = run(args + " --quiet --progress always");
  CHECK(quiet.text.find("] 300/300 images") != std::string::npos);
  Out bad = run(args + " --progress sometimes");
  CHECK(bad.rc == 2);
  CHECK(bad.text.find("--progress") != std::string::npos);
}

TEST_CASE("cli: --cycle runs more images than the data set holds, and says so") {
  Out o = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 2500 --cycle");
  INFO(o.text);
  REQUIRE(o.rc == 0);
  CHECK(o.text.find("Images: 2500 (2000 distinct, cycled)") != std::string::npos);
  Out bad = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 2500");
  CHECK(bad.rc == 1);
  CHECK(bad.text ==
        "cnnrun: --batch 2500: the data set has only 2000 images; add --cycle to run them repeatedly\n");
}

TEST_CASE("cli: convert to safetensors gives identical results") {
  std::string dir = temp_dir("cli-convert");
  Out c = run("convert " + src("netdefs/cifar10.yaml") + " " + dir + "/w.safetensors " + assets());
  INFO(c.text);
  REQUIRE(c.rc == 0);
  Out a = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 300 --dump " + dir +
              "/a.npy");
  Out b = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 300 --weights " + dir +
              "/w.safetensors --dump " + dir + "/b.npy");
  REQUIRE(a.rc == 0);
  REQUIRE(b.rc == 0);
  CHECK(read_file(dir + "/a.npy") == read_file(dir + "/b.npy"));  // bit-identical
}

TEST_CASE(
    "cli: the report names an average pool folded into its fc; convert keeps the pool's fc as written") {
  std::string dir = temp_dir("cli-poolfold");
  const std::string yaml = R"(name: head
input: {channels: 3, height: 32, width: 32}
classes: [airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck]
weights: {format: safetensors, path: head.safetensors}
data: {format: cifar10, path: data/cifar10-sample/test_1000.bin}
layers:
  - {name: c, type: conv, filters: 8, kernel: 3, stride: 4, pad: 1}
  - {name: r, type: relu}
  - {name: mp, type: maxpool, size: 8, stride: 8}
  - {name: ap, type: avgpool, output: 3}
  - {name: fc, type: fc, outputs: 10}
)";
  write_file(dir + "/head.yaml", yaml);
  Network net = parse_netdef_string(yaml, "head");
  random_weights(net, 3);
  write_safetensors(dir + "/head.safetensors", collect_weights(net));
  Out a = run(dir + "/head.yaml " + assets() + " --engine cpu --batch 50 --dump " + dir + "/a.npy");
  INFO(a.text);
  REQUIRE(a.rc == 0);
  CHECK(a.text.find("Note: avgpool 'ap' (8x1x1 -> 8x3x3) folded into fc 'fc': 72 -> 8 inputs\n") !=
        std::string::npos);
  // convert writes the fc's 72 inputs as the netdef declares them (no fold), so its file loads
  // into the same netdef and gives the same outputs.
  Out c = run("convert " + dir + "/head.yaml " + dir + "/w2.safetensors " + assets());
  REQUIRE(c.rc == 0);
  Out b = run(dir + "/head.yaml " + assets() + " --engine cpu --batch 50 --weights " + dir +
              "/w2.safetensors --dump " + dir + "/b.npy");
  REQUIRE(b.rc == 0);
  CHECK(read_file(dir + "/a.npy") == read_file(dir + "/b.npy"));
}

TEST_CASE("cli: a ConvNetJS JSON snapshot gives the same results as the text weights") {
  // The snapshot is written here from the text files in ConvNetJS's own layout (Vol value
  // (x, y, d) at w[((sx * y) + x) * depth + d]; an fc filter's inputs in the previous volume's
  // order), with the input, relu, pool and softmax entries net.toJSON() writes around them.
  Network net = parse_netdef_file(src("netdefs/cifar10.yaml"));
  AssetResolver res(net.source_dir, {shared_dir()});
  load_weights(net, res, "");
  nlohmann::json layers = nlohmann::json::array();
  layers.push_back({{"layer_type", "input"}, {"out_sx", 32}, {"out_sy", 32}, {"out_depth", 3}});
  for (const auto& l : net.layers) {
    if (!l->has(kCapWeights)) {
      layers.push_back({{"layer_type", l->type == "maxpool" ? "pool" : l->type}});
      continue;
    }
    const Tensor& w = l->weight("weight");
    const Tensor& b = l->weight("bias");
    nlohmann::json filters = nlohmann::json::array();
    for (int64_t f = 0; f < w.dims[0]; ++f) {
      nlohmann::json vals = nlohmann::json::object();
      if (l->type == "conv") {
        const int64_t c = w.dims[1], kh = w.dims[2], kw = w.dims[3];
        for (int64_t y = 0; y < kh; ++y)
          for (int64_t x = 0; x < kw; ++x)
            for (int64_t d = 0; d < c; ++d)
              vals[std::to_string((kw * y + x) * c + d)] =
                  w.data[static_cast<size_t>(((f * c + d) * kh + y) * kw + x)];
        filters.push_back({{"sx", kw}, {"sy", kh}, {"depth", c}, {"w", vals}});
      } else {
        const Shape in = l->in_shapes[0];  // 20x4x4
        for (int64_t y = 0; y < in.h; ++y)
          for (int64_t x = 0; x < in.w; ++x)
            for (int64_t d = 0; d < in.c; ++d)
              vals[std::to_string((in.w * y + x) * in.c + d)] =
                  w.data[static_cast<size_t>(f * in.size() + (d * in.h + y) * in.w + x)];
        filters.push_back({{"sx", 1}, {"sy", 1}, {"depth", in.size()}, {"w", vals}});
      }
    }
    nlohmann::json bias = nlohmann::json::object();
    for (size_t i = 0; i < b.data.size(); ++i) bias[std::to_string(i)] = b.data[i];
    layers.push_back({{"layer_type", l->type},
                      {"filters", filters},
                      {"biases", {{"sx", 1}, {"sy", 1}, {"depth", b.data.size()}, {"w", bias}}}});
  }
  std::string dir = temp_dir("cli-cjson");
  write_file(dir + "/snap.json", nlohmann::json{{"layers", layers}}.dump());
  Out a = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 1200 --dump " + dir +
              "/a.npy");
  Out b = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 1200 --weights " + dir +
              "/snap.json --dump " + dir + "/b.npy");
  INFO(b.text);
  REQUIRE(a.rc == 0);
  REQUIRE(b.rc == 0);
  CHECK(b.text.find("Net accuracy: 78.25 % (939/1200)") != std::string::npos);
  CHECK(read_file(dir + "/a.npy") == read_file(dir + "/b.npy"));
  // A snapshot whose layers do not fit the netdef is refused in one line.
  layers.erase(layers.begin() + 1);  // drop conv1
  write_file(dir + "/short.json", nlohmann::json{{"layers", layers}}.dump());
  Out c = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --weights " + dir +
              "/short.json");
  CHECK(c.rc == 1);
  CHECK(c.text.find("the snapshot has 3 conv/fc layers, the netdef 4") != std::string::npos);
}

TEST_CASE("cli: one binary runs two different netdefs") {
  // A second network over the same data: a small residual/branching net with random-free
  // weights written by the test as safetensors through `convert`'s reader format.
  std::string dir = temp_dir("cli-two");
  write_file(dir + "/tiny.yaml", R"(name: tiny
input: {channels: 3, height: 32, width: 32}
classes: [airplane, automobile, bird, cat, deer, dog, frog, horse, ship, truck]
weights: {format: safetensors, path: tiny.safetensors}
data: {format: cifar10, path: data/cifar10-sample/test_1000.bin}
layers:
  - {name: c, type: conv, filters: 4, kernel: 3, stride: 2, pad: 1}
  - {name: r, type: relu}
  - {name: gap, type: avgpool, global: true}
  - {name: fc, type: fc, outputs: 10}
)");
  // fc weights: class k gets channel k%4 -> a deterministic, checkable prediction is not the
  // point here; the point is that the same binary loads and runs a different graph and data.
  std::map<std::string, std::vector<float>> t;
  std::string st;
  {
    // Build the safetensors bytes by hand (header JSON + F32 data).
    std::vector<std::pair<std::string, std::vector<int64_t>>> specs = {
        {"c.bias", {4}}, {"c.weight", {4, 3, 3, 3}}, {"fc.bias", {10}}, {"fc.weight", {10, 4}}};
    nlohmann::json h = nlohmann::json::object();
    std::string data;
    uint32_t seed = 1;
    for (auto& [name, dims] : specs) {
      size_t n = 1;
      for (auto d : dims) n *= static_cast<size_t>(d);
      auto v = random_floats(n, seed++);
      h[name] = {{"dtype", "F32"}, {"shape", dims}, {"data_offsets", {data.size(), data.size() + 4 * n}}};
      data.append(reinterpret_cast<const char*>(v.data()), 4 * n);
    }
    std::string hs = h.dump();
    uint64_t len = hs.size();
    st.append(reinterpret_cast<const char*>(&len), 8);
    st += hs + data;
  }
  write_file(dir + "/tiny.safetensors", st);
  Out o = run(dir + "/tiny.yaml " + assets() + " --engine cpu");
  INFO(o.text);
  REQUIRE(o.rc == 0);
  CHECK(o.text.find("cnnrun 0.1.0 (commit ") != std::string::npos);
  CHECK(o.text.find("): tiny (") != std::string::npos);
  CHECK(o.text.find("Images: 1000") != std::string::npos);
  CHECK(o.text.find("gap") != std::string::npos);
  Out c = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet");
  CHECK(c.rc == 0);
}

TEST_CASE("cli: --version and the report name the commit the binary was built from") {
  Out v = run("--version");
  INFO(v.text);
  REQUIRE(v.rc == 0);
  const size_t at = v.text.find("(commit ");
  REQUIRE(at != std::string::npos);
  const std::string commit = v.text.substr(at + 8, v.text.find(')', at) - at - 8);
  std::string head;
  if (run_command("git -C " + std::string(CNNRUN_SOURCE_DIR) + " rev-parse --short=12 HEAD 2>/dev/null",
                  &head) == 0 &&
      head.size() >= 12) {
    // Built from this tree (the build_commit target runs at every build): its HEAD, maybe dirty.
    CHECK(commit.substr(0, 12) == head.substr(0, 12));
    CHECK((commit.size() == 12 || commit.substr(12) == "-dirty"));
  } else {
    MESSAGE("no git work tree at the source dir: the commit is 'unknown'");
    CHECK(commit == "unknown");
  }
  const std::string dir = temp_dir("version_json");
  Out j = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet --json " +
              dir + "/r.json");
  REQUIRE(j.rc == 0);
  const auto doc = nlohmann::json::parse(read_file(dir + "/r.json"));
  CHECK(doc.at("cnnrun_commit").get<std::string>() == commit);
  CHECK(doc.at("cnnrun_version").get<std::string>() == v.text.substr(0, v.text.find(' ')));
}

TEST_CASE("cli: errors are one line on stderr with a non-zero exit") {
  std::string dir = temp_dir("cli-err");
  SUBCASE("no such netdef") {
    Out o = run(dir + "/nope.yaml");
    CHECK(o.rc == 1);
    CHECK(o.text == "cnnrun: " + dir + "/nope.yaml: cannot open: no such file or directory\n");
  }
  SUBCASE("bad netdef") {
    write_file(dir + "/bad.yaml",
               "input: {channels: 3, height: 32, width: 32}\nclasses: [a]\nlayers:\n  - {type: fc, outputs: "
               "1, bais: true}\n");
    Out o = run(dir + "/bad.yaml");
    CHECK(o.rc == 1);
    CHECK(o.text == "cnnrun: " + dir +
                        "/bad.yaml:4:28: layer 'fc1' (fc): key 'bais': unknown key; did you mean 'bias'?\n");
  }
  SUBCASE("bad option") {
    Out o = run(src("netdefs/cifar10.yaml") + " --engine tpu");
    CHECK(o.rc == 2);
    CHECK(count_lines(o.text) == 1);
    Out z = run(src("netdefs/cifar10.yaml") + " --batch 0");
    CHECK(z.rc == 2);
    CHECK(z.text == "cnnrun: --batch: expected a positive integer, found '0' (see cnnrun --help)\n");
  }
  SUBCASE("netdef path escaping the asset roots") {
    write_file(dir + "/evil.yaml",
               std::string("input: {channels: 3, height: 32, width: 32}\nclasses: [a]\n") +
                   "weights: {format: safetensors, path: ../../../../../../etc/passwd}\n" +
                   "layers:\n  - {type: fc, outputs: 1, bias: false}\n");
    Out o = run(dir + "/evil.yaml");
    CHECK(o.rc == 1);
    CHECK(count_lines(o.text) == 1);
    CHECK(o.text.find("resolves outside") != std::string::npos);
  }
  SUBCASE("output would overwrite an input") {
    Out o = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --json " +
                src("netdefs/cifar10.yaml"));
    CHECK(o.rc == 1);
    CHECK(o.text.find("refusing to overwrite an input file") != std::string::npos);
  }
}

TEST_CASE("cli: --gpu-memory takes a positive number of MiB") {
  for (const char* bad : {"0", "abc", "1.5", "64MiB"}) {
    INFO("--gpu-memory " << bad);
    Out o = run(src("netdefs/cifar10.yaml") + " --gpu-memory " + bad);
    CHECK(o.rc == 2);
    CHECK(o.text == std::string("cnnrun: --gpu-memory: expected a positive integer, found '") + bad +
                        "' (see cnnrun --help)\n");
  }
  Out neg = run(src("netdefs/cifar10.yaml") + " --gpu-memory -5");
  CHECK(neg.rc == 2);
  CHECK(count_lines(neg.text) == 1);
  Out h = run("--help");
  CHECK(h.rc == 0);
  CHECK(h.text.find("--gpu-memory") != std::string::npos);
  // The CPU engine has no GPU memory to cap: the option is accepted and changes nothing.
  Out c =
      run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet --gpu-memory 64");
  CHECK(c.rc == 0);
}

TEST_CASE("cli: --resident needs the GPU engine: one line, exit 2 with --engine cpu") {
  Out o = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --resident");
  CHECK(o.rc == 2);
  CHECK(o.text == "cnnrun: --resident needs --engine gpu\n");
  Out h = run("--help");
  CHECK(h.rc == 0);
  CHECK(h.text.find("--resident") != std::string::npos);
}

TEST_CASE("cli: --conv-algo and --gpu-off take known names only; CNNRUN_GPU_OFF is read by the CLI") {
  Out a = run(src("netdefs/cifar10.yaml") + " --conv-algo winograd");
  CHECK(a.rc == 2);
  CHECK(
      a.text ==
      "cnnrun: --conv-algo: expected auto, im2col, implicit, cudnn, cudnn-3xtf32, depthwise, cutlass, stem, "
      "gemm or conv1x1, found "
      "'winograd' "
      "(see "
      "cnnrun "
      "--help)\n");
  Out g = run(src("netdefs/cifar10.yaml") + " --gpu-off pool,tensorcores");
  CHECK(g.rc == 2);
  CHECK(g.text ==
        "cnnrun: --gpu-off: unknown GPU optimisation 'tensorcores' to turn off; expected names from "
        "pool,mean,u8,rows,graph,tc,exact,pack,graphapi,share,concat,stemrows,dwtile,poolcols,prepool,"
        "fastact,dwsmall,dwrows (see "
        "cnnrun "
        "--help)\n");
  Out e = run_env("CNNRUN_GPU_OFF=pool,nope", src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu");
  CHECK(e.rc == 2);
  CHECK(e.text ==
        "cnnrun: CNNRUN_GPU_OFF=pool,nope: unknown GPU optimisation 'nope' to turn off; expected names from "
        "pool,mean,u8,rows,graph,tc,exact,pack,graphapi,share,concat,stemrows,dwtile,poolcols,prepool,"
        "fastact,dwsmall,dwrows\n");
  // Known names are accepted (the CPU engine has nothing to turn off: the run is the same).
  Out ok = run_env("CNNRUN_GPU_OFF=pool,graph",
                   src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet");
  CHECK(ok.rc == 0);
  Out opt = run(
      src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet --gpu-off " +
      "pool,mean,u8,rows,graph,tc,exact,pack,graphapi,share,concat,stemrows,dwtile,poolcols,prepool,fastact,"
      "dwsmall,dwrows --conv-algo im2col");
  CHECK(opt.rc == 0);
  CHECK(opt.text == ok.text);
}

TEST_CASE("cli: --repeat and --warmup: the median of the timed runs only, every run's time in the report") {
  std::string dir = temp_dir("cli-warmup");
  const std::string base = src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 40 --quiet";
  Out o = run(base + " --repeat 3 --warmup 2 --json " + dir + "/r.json");
  INFO(o.text);
  REQUIRE(o.rc == 0);
  auto j = nlohmann::json::parse(read_file(dir + "/r.json"));
  // "--warmup N: forward times (ms) a b; ..." and "--repeat N: ...": N values each.
  auto times = [&](const std::string& prefix) {
    std::vector<double> t;
    for (const auto& n : j["notes"]) {
      const std::string s = n.get<std::string>();
      if (s.rfind(prefix, 0) != 0) continue;
      std::istringstream in(s.substr(s.find("(ms)") + 4, s.find(';') - s.find("(ms)") - 4));
      for (double v; in >> v;) t.push_back(v);
    }
    return t;
  };
  const std::vector<double> warm = times("--warmup 2: forward times (ms) ");
  std::vector<double> timed = times("--repeat 3: forward times (ms) ");
  CHECK(warm.size() == 2);
  REQUIRE(timed.size() == 3);
  std::sort(timed.begin(), timed.end());
  CHECK(j["times"]["forward_s"].get<double>() * 1e3 == doctest::Approx(timed[1]).epsilon(1e-4));
  CHECK(j["images"] == 40);
  // One timed run after a warm-up; a negative count is refused.
  o = run(base + " --warmup 1 --json " + dir + "/w.json");
  REQUIRE(o.rc == 0);
  j = nlohmann::json::parse(read_file(dir + "/w.json"));
  CHECK(times("--warmup 1: forward times (ms) ").size() == 1);
  CHECK(times("--repeat 1: forward times (ms) ").size() == 1);
  o = run(base + " --warmup -1");
  CHECK(o.rc != 0);
  CHECK(o.text.find("--warmup") != std::string::npos);
}

TEST_CASE("cli: --cudnn-plans takes 1 to 64 candidates; the CPU engine runs the same with any") {
  for (const char* bad : {"0", "65", "-1", "two"}) {
    INFO(bad);
    Out b = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --cudnn-plans " + bad);
    CHECK(b.rc == 2);
    CHECK(b.text.rfind("cnnrun: --cudnn-plans: ", 0) == 0);
    CHECK(std::count(b.text.begin(), b.text.end(), '\n') == 1);  // one line
  }
  Out two = run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet");
  Out eight =
      run(src("netdefs/cifar10.yaml") + " " + assets() + " --engine cpu --batch 10 --quiet --cudnn-plans 8");
  CHECK(two.rc == 0);
  CHECK(eight.rc == 0);
  CHECK(eight.text == two.text);
  GpuTuning t;
  CHECK(t.graph_plans == 2);
  t.graph_plans = 8;
  CHECK(t != GpuTuning{});  // a different count is a different tuning: the executor searches again
}

TEST_CASE("parse_gpu_off: each name turns one switch off; empty names are skipped") {
  const GpuTuning all = parse_gpu_off("");
  CHECK(all == GpuTuning{});
  const GpuTuning t = parse_gpu_off("pool,,exact");
  CHECK_FALSE(t.fuse_pool);
  CHECK_FALSE(t.exact_pixels);
  CHECK(t.fuse_mean);
  CHECK(t.fuse_u8);
  CHECK(t.row_copies);
  CHECK(t.graphs);
  CHECK(t.tensor_cores);
  CHECK(t.pack_low);
  const GpuTuning none = parse_gpu_off(kGpuOffNames);
  CHECK_FALSE(none.fuse_pool);
  CHECK_FALSE(none.fuse_mean);
  CHECK(parse_gpu_off("mean") != GpuTuning{});
  CHECK_FALSE(none.fuse_u8);
  CHECK_FALSE(none.row_copies);
  CHECK_FALSE(none.graphs);
  CHECK_FALSE(none.tensor_cores);
  CHECK_FALSE(none.exact_pixels);
  CHECK_FALSE(none.pack_low);
  CHECK_FALSE(none.cudnn_graph);
  CHECK_FALSE(none.share_buffers);
  CHECK_FALSE(none.dw_tile);
  CHECK_FALSE(none.pool_cols);
  CHECK_FALSE(none.fuse_prepool);
  CHECK_FALSE(none.fast_act);
  CHECK_FALSE(none.dw_small);
  CHECK_FALSE(none.dw_rows);
  CHECK(parse_gpu_off("dwsmall") != GpuTuning{});
  CHECK(parse_gpu_off("dwrows") != GpuTuning{});
  CHECK(parse_gpu_off("fastact") != GpuTuning{});
  CHECK(t.fast_act);
  CHECK(parse_gpu_off("dwtile") != GpuTuning{});
  CHECK(parse_gpu_off("poolcols") != GpuTuning{});
  CHECK(parse_gpu_off("prepool") != GpuTuning{});
  CHECK_FALSE(parse_gpu_off("prepool").fuse_prepool);
  CHECK(parse_gpu_off("share") == [] {
    GpuTuning s;
    s.share_buffers = false;
    return s;
  }());
  CHECK_THROWS_WITH_AS(parse_gpu_off("Pool"), doctest::Contains("'Pool'"), Error);
  CHECK(parse_conv_algo("implicit") == ConvAlgo::kImplicit);
  CHECK(parse_conv_algo("auto") == ConvAlgo::kAuto);
  CHECK_FALSE(parse_conv_algo("").has_value());
  for (ConvAlgo a : {ConvAlgo::kAuto, ConvAlgo::kImplicit, ConvAlgo::kIm2col, ConvAlgo::kCudnn})
    CHECK(parse_conv_algo(conv_algo_name(a)) == a);
}

// The README's option table is the user's reference: every option `cnnrun --help` lists (and
// each subcommand's) must be named there. --cudnn-plans was missing from it for a session.
TEST_CASE("cli: every option the help lists is in the README") {
  const std::string readme = read_file(src("README.md"));
  REQUIRE(!readme.empty());
  size_t seen = 0;
  for (const std::string cmd : {"--help", "convert --help", "import --help"}) {
    Out o = run(cmd);
    INFO(cmd << ":\n" << o.text);
    REQUIRE(o.rc == 0);
    std::istringstream lines(o.text);
    for (std::string line; std::getline(lines, line);) {
      // An option line: "  --name ..." or "  -h,--name ...".
      size_t p = line.find_first_not_of(' ');
      if (p == std::string::npos || p == 0 || line.compare(p, 1, "-") != 0) continue;
      if (const size_t comma = line.find(",--", p); comma != std::string::npos && comma < p + 4)
        p = comma + 1;
      if (line.compare(p, 2, "--") != 0) continue;
      const size_t end = line.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", p + 2);
      const std::string name = line.substr(p, end == std::string::npos ? std::string::npos : end - p);
      if (name == "--help") continue;
      ++seen;
      // Named as itself, not as the start of a longer option (--validate in --validate-images).
      bool found = false;
      for (size_t at = readme.find(name); at != std::string::npos && !found; at = readme.find(name, at + 1)) {
        const size_t after = at + name.size();
        found = after >= readme.size() ||
                !(std::isalnum(static_cast<unsigned char>(readme[after])) || readme[after] == '-');
      }
      CHECK_MESSAGE(found, name << " (" << cmd << ") is not in README.md");
    }
  }
  CHECK(seen >= 30);  // the parse found the options (the main command alone has more than 30)
}
