#include <nlohmann/json.hpp>

#include "errors.hpp"
#include "request.hpp"
#include "request_errors.hpp"
#include "test_util.hpp"

using kernelopt::BadRequest;
using nlohmann::json;

namespace {

json valid() {
  return json::parse(R"({
    "protocol": 1, "device": 0, "module": "/m.cubin", "entry": "k",
    "guard_bytes": 512, "flush_l2": false,
    "cases": [{
      "name": "c0",
      "args": [
        {"kind": "buffer", "name": "A", "role": "in", "bytes": 16, "input": "/a"},
        {"kind": "buffer", "name": "X", "role": "inout", "bytes": 4, "input": "/x", "output": "/xo"},
        {"kind": "buffer", "name": "C", "role": "out", "bytes": 0, "output": "/c", "init": "zero"},
        {"kind": "scalar", "name": "M", "dtype": "int32", "value": 4096, "raw": "00100000"}
      ],
      "launch": {"grid": [2, 1, 1], "block": [128, 1, 1]},
      "timing": {"warmup": 3, "iterations": 7}
    }]
  })");
}

}  // namespace

TEST_CASE("a valid request parses with every field") {
  const auto r = kernelopt::parse_request(valid());
  CHECK(r.device == 0);
  CHECK(r.module_path == "/m.cubin");
  CHECK(r.entry == "k");
  CHECK(r.guard_bytes == 512);
  CHECK(!r.flush_l2);
  CHECK(r.cases.size() == 1);
  const auto& c = r.cases[0];
  CHECK(c.args.size() == 4);
  CHECK(c.args[0].buffer.role == kernelopt::BufferRole::in);
  CHECK(c.args[1].buffer.output == "/xo");
  CHECK(c.args[2].buffer.init == kernelopt::BufferInit::zero);
  CHECK(c.args[2].buffer.bytes == 0);
  CHECK(c.args[3].scalar.raw == (std::vector<std::uint8_t>{0x00, 0x10, 0x00, 0x00}));
  CHECK(c.launch.grid[0] == 2 && c.launch.block[0] == 128 && c.launch.shared_bytes == 0);
  CHECK(c.timing && c.timing->warmup == 3 && c.timing->iterations == 7);
}

TEST_CASE("defaults: device 0, guard 65536, flush_l2 on, poison 255, no timing") {
  auto doc = valid();
  doc.erase("device");
  doc.erase("guard_bytes");
  doc.erase("flush_l2");
  doc["cases"][0].erase("timing");
  doc["cases"][0]["args"][2].erase("init");
  const auto r = kernelopt::parse_request(doc);
  CHECK(r.device == 0);
  CHECK(r.guard_bytes == 65536);
  CHECK(r.flush_l2);
  CHECK(!r.cases[0].timing);
  CHECK(r.cases[0].args[2].buffer.init == kernelopt::BufferInit::poison);
  CHECK(r.cases[0].args[2].buffer.poison_byte == 255);
}

TEST_CASE("iterations 0 or a null timing mean validate only; null fields count as absent") {
  auto doc = valid();
  doc["cases"][0]["timing"] = {{"warmup", 5}, {"iterations", 0}};
  CHECK(!kernelopt::parse_request(doc).cases[0].timing);
  doc["cases"][0]["timing"] = nullptr;
  CHECK(!kernelopt::parse_request(doc).cases[0].timing);
  doc["cases"][0]["args"][0]["output"] = nullptr;
  doc["cases"][0]["args"][2]["input"] = nullptr;
  CHECK(test::error_of(doc).empty());
}

TEST_CASE("top-level fields are validated with their names") {
  EXPECT_ERROR(json::array(), "request: must be a JSON object");
  auto d = valid();
  d["protocol"] = 3;
  EXPECT_ERROR(d, "protocol: must be 1 or 2");
  d = valid();
  d["protocol"] = 0;
  EXPECT_ERROR(d, "protocol: must be 1 or 2");
  d = valid();
  d["protocol"] = 2;
  CHECK(test::error_of(d).empty());
  d = valid();
  d["op"] = "launch";
  EXPECT_ERROR(d, "op: must be \"run\" or \"baseline\"");
  d = valid();
  d["op"] = "run";
  CHECK(test::error_of(d).empty());
  d = valid();
  d.erase("protocol");
  EXPECT_ERROR(d, "protocol: is required");
  d = valid();
  d["module"] = "";
  EXPECT_ERROR(d, "module: must be a non-empty string");
  d = valid();
  d["module"] = 3;
  EXPECT_ERROR(d, "module: must be a string");
  d = valid();
  d.erase("entry");
  EXPECT_ERROR(d, "entry: is required");
  d = valid();
  d["device"] = -1;
  EXPECT_ERROR(d, "device: must be a non-negative integer");
  d = valid();
  d["guard_bytes"] = 100;
  EXPECT_ERROR(d, "guard_bytes: must be a multiple of 256");
  d = valid();
  d["guard_bytes"] = (16 << 20) + 256;
  EXPECT_ERROR(d, "guard_bytes: must be at most");
  d = valid();
  d["guard_bytes"] = 0;
  CHECK(test::error_of(d).empty());
  d = valid();
  d["flush_l2"] = 1;
  EXPECT_ERROR(d, "flush_l2: must be true or false");
  d = valid();
  d["cases"] = json::array();
  EXPECT_ERROR(d, "cases: must hold at least one case");
  d = valid();
  d["cases"] = json::object();
  EXPECT_ERROR(d, "cases: must be an array");
}

TEST_CASE("old timing objects parse to events mode, no blocking, no adaptive") {
  const auto req = kernelopt::parse_request(valid());
  const auto& t = *req.cases[0].timing;
  CHECK(t.warmup == 3 && t.iterations == 7);
  CHECK(t.mode == kernelopt::TimingMode::events && !t.blocking && t.graph_batch == 0);
  CHECK(!t.adaptive.has_value());
  CHECK(req.op == kernelopt::RequestOp::run && req.support_module.empty());
}

TEST_CASE("timing v2 fields parse and are validated with their paths") {
  auto d = valid();
  d["support_module"] = "/s.cubin";
  d["cases"][0]["timing"] = {
      {"warmup", 2},
      {"iterations", 50},
      {"mode", "graph"},
      {"blocking", true},
      {"graph_batch", 64},
      {"adaptive", {{"target_rse", 0.005}, {"max_ms", 500}, {"max_iterations", 400}}}};
  const auto req = kernelopt::parse_request(d);
  const auto& t = *req.cases[0].timing;
  CHECK(t.mode == kernelopt::TimingMode::graph && t.blocking && t.graph_batch == 64);
  CHECK(t.adaptive && t.adaptive->target_rse == 0.005 && t.adaptive->max_ms == 500 &&
        t.adaptive->max_iterations == 400);
  CHECK(req.support_module == "/s.cubin");

  d = valid();
  d["cases"][0]["timing"]["adaptive"] = json::object();
  const auto defaults = kernelopt::parse_request(d);
  CHECK(defaults.cases[0].timing->adaptive->target_rse == 0.01);
  CHECK(defaults.cases[0].timing->adaptive->max_ms == 2000);
  CHECK(defaults.cases[0].timing->adaptive->max_iterations == 10000);

  d = valid();
  d["cases"][0]["timing"]["mode"] = "cupti";
  EXPECT_ERROR(d, "cases[0].timing.mode: must be \"events\" or \"graph\"");
  d = valid();
  d["cases"][0]["timing"]["graph_batch"] = 8;
  EXPECT_ERROR(d, "cases[0].timing.graph_batch: only applies to \"mode\": \"graph\"");
  d = valid();
  d["cases"][0]["timing"]["mode"] = "graph";
  d["cases"][0]["timing"]["graph_batch"] = 0;
  EXPECT_ERROR(d, "cases[0].timing.graph_batch: must be an integer 1..1000, got 0");
  d = valid();
  d["cases"][0]["timing"]["mode"] = "graph";
  d["cases"][0]["timing"]["graph_batch"] = 1001;
  EXPECT_ERROR(d, "cases[0].timing.graph_batch: must be at most 1000");
  d = valid();
  d["cases"][0]["timing"]["blocking"] = true;
  EXPECT_ERROR(
      d, "cases[0].timing.blocking: needs the harness's support kernels: pass \"support_module\"");
  d = valid();
  d["cases"][0]["timing"]["blocking"] = "yes";
  EXPECT_ERROR(d, "cases[0].timing.blocking: must be true or false");
  d = valid();
  d["cases"][0]["timing"]["adaptive"] = {{"target_rse", 0}};
  EXPECT_ERROR(d, "cases[0].timing.adaptive.target_rse: must be a positive number");
  d = valid();
  d["cases"][0]["timing"]["adaptive"] = {{"target_rse", 1.5}};
  EXPECT_ERROR(d, "cases[0].timing.adaptive.target_rse: must be below 1");
  d = valid();
  d["cases"][0]["timing"]["adaptive"] = {{"max_ms", "long"}};
  EXPECT_ERROR(d, "cases[0].timing.adaptive.max_ms: must be a positive number");
  d = valid();
  d["cases"][0]["timing"]["adaptive"] = {{"max_iterations", 5}};
  EXPECT_ERROR(
      d, "cases[0].timing.adaptive.max_iterations: must be at least the timing's iterations (7)");
  d = valid();
  d["cases"][0]["timing"]["adaptive"] = 0.01;
  EXPECT_ERROR(d, "cases[0].timing.adaptive: must be an object");
}

json baseline() {
  return {{"protocol", 2},
          {"op", "baseline"},
          {"device", 0},
          {"library", "cublas"},
          {"library_path", "/lib/libcublas.so.13"},
          {"routine", "sgemm"},
          {"m", 128},
          {"n", 256},
          {"k", 64},
          {"flush_l2", false},
          {"timing", {{"warmup", 1}, {"iterations", 5}}}};
}

TEST_CASE("baseline requests need no module, entry or cases") {
  const auto req = kernelopt::parse_request(baseline());
  CHECK(req.op == kernelopt::RequestOp::baseline);
  CHECK(req.baseline.library == "cublas" && req.baseline.routine == "sgemm");
  CHECK(req.baseline.library_path == "/lib/libcublas.so.13");
  CHECK(req.baseline.m == 128 && req.baseline.n == 256 && req.baseline.k == 64);
  CHECK(req.baseline.timing.iterations == 5 && !req.flush_l2);
  auto d = baseline();
  d.erase("timing");
  const auto dflt = kernelopt::parse_request(d);
  CHECK(dflt.baseline.timing.warmup == 10 && dflt.baseline.timing.iterations == 100);

  d = baseline();
  d["library"] = "rocblas";
  EXPECT_ERROR(d, "library: must be \"cublas\"");
  d = baseline();
  d.erase("library_path");
  EXPECT_ERROR(d, "library_path: is required");
  d = baseline();
  d["routine"] = "dgemm";
  EXPECT_ERROR(d, "routine: must be \"sgemm\"");
  d = baseline();
  d["k"] = 0;
  EXPECT_ERROR(d, "k: must be a positive integer, got 0");
  d = baseline();
  d["m"] = 1 << 20;
  EXPECT_ERROR(d, "m: must be at most 65536");
  d = baseline();
  d["timing"] = {{"iterations", 0}};
  EXPECT_ERROR(d, "timing.iterations: must be positive for a baseline");
  d = baseline();
  d["timing"]["blocking"] = true;
  EXPECT_ERROR(d, "timing.blocking: needs the harness's support kernels");
}

TEST_CASE("case names must be unique and present") {
  auto d = valid();
  d["cases"].push_back(d["cases"][0]);
  EXPECT_ERROR(d, "cases[1].name: duplicate case name \"c0\"");
  d = valid();
  d["cases"][0].erase("name");
  EXPECT_ERROR(d, "cases[0].name: is required");
  d = valid();
  d["cases"][0]["args"][1]["name"] = "A";
  EXPECT_ERROR(d, "cases[0].args[1].name: duplicate argument name");
}

TEST_CASE("buffer fields are validated with their paths") {
  auto d = valid();
  d["cases"][0]["args"][1]["bytes"] = -1;
  EXPECT_ERROR(d, "cases[0].args[1].bytes: must be a non-negative integer");
  d = valid();
  d["cases"][0]["args"][1]["bytes"] = 4.0;
  EXPECT_ERROR(d, "cases[0].args[1].bytes: must be a non-negative integer");
  d = valid();
  d["cases"][0]["args"][1]["bytes"] = "4";
  EXPECT_ERROR(d, "cases[0].args[1].bytes: must be a non-negative integer");
  d = valid();
  d["cases"][0]["args"][0]["role"] = "both";
  EXPECT_ERROR(d, "cases[0].args[0].role: must be one of");
  d = valid();
  d["cases"][0]["args"][0]["kind"] = "texture";
  EXPECT_ERROR(d, "cases[0].args[0].kind: must be \"buffer\" or \"scalar\"");
  d = valid();
  d["cases"][0]["args"][0].erase("input");
  EXPECT_ERROR(d, "cases[0].args[0].input: is required for role \"in\"");
  d = valid();
  d["cases"][0]["args"][1].erase("output");
  EXPECT_ERROR(d, "cases[0].args[1].output: is required for role \"inout\"");
  d = valid();
  d["cases"][0]["args"][2].erase("output");
  EXPECT_ERROR(d, "cases[0].args[2].output: is required for role \"out\"");
  d = valid();
  d["cases"][0]["args"][2]["input"] = "/i";
  EXPECT_ERROR(d, "cases[0].args[2].input: an \"out\" buffer is not uploaded");
  d = valid();
  d["cases"][0]["args"][0]["output"] = "/o";
  EXPECT_ERROR(d, "cases[0].args[0].output: an \"in\" buffer is not written back");
  d = valid();
  d["cases"][0]["args"][2]["init"] = "nan";
  EXPECT_ERROR(d, "cases[0].args[2].init: must be \"poison\" or \"zero\"");
  d = valid();
  d["cases"][0]["args"][2]["poison_byte"] = 256;
  EXPECT_ERROR(d, "cases[0].args[2].poison_byte: must be at most 255");
  d = valid();
  d["cases"][0]["args"][0]["init"] = "poison";  // ignored on "in"
  CHECK(test::error_of(d).empty());
  d = valid();
  d["cases"][0]["args"][0] = 5;
  EXPECT_ERROR(d, "cases[0].args[0]: must be an object");
}

TEST_CASE("launch and timing are validated with their paths") {
  auto d = valid();
  d["cases"][0]["launch"]["grid"] = {1, 1};
  EXPECT_ERROR(d, "cases[0].launch.grid: must be an array of 3 positive integers");
  d = valid();
  d["cases"][0]["launch"]["block"] = {32, 0, 1};
  EXPECT_ERROR(d, "cases[0].launch.block[1]: must be a positive integer, got 0");
  d = valid();
  d["cases"][0]["launch"]["block"] = {32, 1.5, 1};
  EXPECT_ERROR(d, "cases[0].launch.block[1]: must be a positive integer");
  d = valid();
  d["cases"][0]["launch"]["grid"] = {4294967296ull, 1, 1};
  EXPECT_ERROR(d, "cases[0].launch.grid[0]: must be at most 4294967295");
  d = valid();
  d["cases"][0]["launch"]["shared_bytes"] = -4;
  EXPECT_ERROR(d, "cases[0].launch.shared_bytes: must be a non-negative integer");
  d = valid();
  d["cases"][0].erase("launch");
  EXPECT_ERROR(d, "cases[0].launch: is required");
  d = valid();
  d["cases"][0]["timing"]["iterations"] = 100001;
  EXPECT_ERROR(d, "cases[0].timing.iterations: must be at most 100000");
  d = valid();
  d["cases"][0]["timing"]["warmup"] = 10001;
  EXPECT_ERROR(d, "cases[0].timing.warmup: must be at most 10000");
  d = valid();
  d["cases"][0]["timing"].erase("iterations");
  EXPECT_ERROR(d, "cases[0].timing.iterations: is required");
  d = valid();
  d["cases"][0]["timing"] = {{"iterations", 100000}, {"warmup", 10000}};
  CHECK(test::error_of(d).empty());
}

// ---- protocol 2 fields ---------------------------------------------------------------------

namespace {

// valid() with a float32 compare on "C" (8 elements) and the fields that need the support
// module.
json valid_v2() {
  auto d = valid();
  d["protocol"] = 2;
  d["support_module"] = "/support.cubin";
  d["input_cache"] = true;
  d["input_cache_bytes"] = 1 << 20;
  auto& c = d["cases"][0]["args"][2];
  c["bytes"] = 32;
  c["dtype"] = "float32";
  c["expected"] = "/c_expected.bin";
  c["timed_expected"] = "/c_timed_expected.bin";
  c["compare"] = {{"abs_tol", 1e-6}, {"rtol", 0.001}, {"rel_floor", 0.5}};
  c["write_output"] = true;
  d["cases"][0]["args"][0]["timed_input"] = "/a_timed";
  d["cases"][0]["repeat_validation"] = true;
  return d;
}

}  // namespace

TEST_CASE("protocol 2 fields parse") {
  const auto r = kernelopt::parse_request(valid_v2());
  CHECK(r.support_module == "/support.cubin");
  CHECK(r.input_cache && r.input_cache_bytes == std::uint64_t{1} << 20);
  const auto& c = r.cases[0];
  CHECK(c.repeat_validation);
  CHECK(c.has_expected() && c.has_timed_check());
  CHECK(c.args[0].buffer.timed_input == "/a_timed");
  const auto& b = c.args[2].buffer;
  CHECK(b.dtype == kernelopt::ScalarType::float32);
  CHECK(b.expected == "/c_expected.bin" && b.timed_expected == "/c_timed_expected.bin");
  CHECK(b.compare.abs_tol == 1e-6 && b.compare.rtol == 0.001 && b.compare.rel_floor == 0.5);
  CHECK(b.write_output);
}

TEST_CASE("protocol 2 defaults: no cache, no compare, no repeat, no timed check") {
  const auto r = kernelopt::parse_request(valid());
  CHECK(r.support_module.empty() && !r.input_cache && !r.input_cache_bytes);
  CHECK(!r.cases[0].repeat_validation && !r.cases[0].has_expected() &&
        !r.cases[0].has_timed_check());
  CHECK(!r.cases[0].args[2].buffer.dtype && !r.cases[0].args[2].buffer.write_output);
  // A dtype alone (no expected) needs no support module.
  auto d = valid();
  d["cases"][0]["args"][2]["dtype"] = "int8";
  CHECK(test::error_of(d).empty());
}

TEST_CASE("protocol 2 top-level fields are validated") {
  auto d = valid_v2();
  d["support_module"] = 5;
  EXPECT_ERROR(d, "support_module: must be a string");
  d = valid_v2();
  d["support_module"] = "";
  EXPECT_ERROR(d, "support_module: must be a non-empty");
  d = valid_v2();
  d["input_cache"] = "yes";
  EXPECT_ERROR(d, "input_cache: must be true or false");
  d = valid_v2();
  d["input_cache_bytes"] = -1;
  EXPECT_ERROR(d, "input_cache_bytes: must be a non-negative integer");
  d = valid_v2();
  d["input_cache_bytes"] = 1.5;
  EXPECT_ERROR(d, "input_cache_bytes: must be a non-negative integer");
  d = valid_v2();
  d["cases"][0]["repeat_validation"] = 1;
  EXPECT_ERROR(d, "cases[0].repeat_validation: must be true or false");
}

TEST_CASE("the support module is required by expected, timed_expected and repeat_validation") {
  auto d = valid_v2();
  d.erase("support_module");
  EXPECT_ERROR(d, "support_module: is required by cases[0].repeat_validation");
  d["cases"][0].erase("repeat_validation");
  EXPECT_ERROR(d, "support_module: is required by cases[0].args[2].expected");
  d["cases"][0]["args"][2].erase("expected");
  EXPECT_ERROR(d, "support_module: is required by cases[0].args[2].timed_expected");
  d["cases"][0]["args"][2].erase("timed_expected");
  d["cases"][0]["args"][2].erase("compare");
  CHECK(test::error_of(d).empty());  // timed_input and input_cache work without it
}

TEST_CASE("protocol 2 buffer fields are validated with their paths") {
  auto d = valid_v2();
  d["cases"][0]["args"][2]["dtype"] = "float128";
  EXPECT_ERROR(d, "cases[0].args[2].dtype: unknown dtype \"float128\"");
  d = valid_v2();
  d["cases"][0]["args"][2]["dtype"] = 4;
  EXPECT_ERROR(d, "cases[0].args[2].dtype: must be a string");
  d = valid_v2();
  d["cases"][0]["args"][2]["bytes"] = 30;
  EXPECT_ERROR(d, "cases[0].args[2].bytes: 30 is not a whole number of float32 elements");
  d = valid_v2();
  d["cases"][0]["args"][2].erase("dtype");
  EXPECT_ERROR(d, "cases[0].args[2].dtype: is required with \"expected\"");
  d = valid_v2();
  d["cases"][0]["args"][2].erase("compare");
  EXPECT_ERROR(d, "cases[0].args[2].compare: is required with \"expected\"");
  d = valid_v2();
  d["cases"][0]["args"][2]["expected"] = 1;
  EXPECT_ERROR(d, "cases[0].args[2].expected: must be a string");
  d = valid_v2();
  d["cases"][0]["args"][0]["expected"] = "/e";
  EXPECT_ERROR(d, "cases[0].args[0].expected: an \"in\" buffer is not compared");
  d = valid_v2();
  d["cases"][0]["args"][0]["timed_expected"] = "/e";
  EXPECT_ERROR(d, "cases[0].args[0].timed_expected: an \"in\" buffer is not compared");
  d = valid_v2();
  d["cases"][0]["args"][2]["timed_input"] = "/t";
  EXPECT_ERROR(d, "cases[0].args[2].timed_input: an \"out\" buffer is not uploaded");
  d = valid_v2();
  d["cases"][0]["args"][0]["timed_input"] = false;
  EXPECT_ERROR(d, "cases[0].args[0].timed_input: must be a string");
  d = valid_v2();
  d["cases"][0]["args"][1]["timed_input"] = "/x_timed";  // inout is fine
  CHECK(test::error_of(d).empty());
  d = valid_v2();
  d["cases"][0]["args"][2]["write_output"] = "true";
  EXPECT_ERROR(d, "cases[0].args[2].write_output: must be true or false");
}

TEST_CASE("compare tolerances are validated") {
  auto d = valid_v2();
  d["cases"][0]["args"][2]["compare"] = 0.1;
  EXPECT_ERROR(d, "cases[0].args[2].compare: must be an object");
  d = valid_v2();
  d["cases"][0]["args"][2]["compare"].erase("rtol");
  EXPECT_ERROR(d, "cases[0].args[2].compare.rtol: is required");
  d = valid_v2();
  d["cases"][0]["args"][2]["compare"]["abs_tol"] = -1e-3;
  EXPECT_ERROR(d, "cases[0].args[2].compare.abs_tol: must be a finite number >= 0");
  d = valid_v2();
  d["cases"][0]["args"][2]["compare"]["rtol"] = "0.1";
  EXPECT_ERROR(d, "cases[0].args[2].compare.rtol: must be a number");
  d = valid_v2();
  d["cases"][0]["args"][2]["compare"]["rel_floor"] = 0;
  EXPECT_ERROR(d, "cases[0].args[2].compare.rel_floor: must be > 0");
  d = valid_v2();
  d["cases"][0]["args"][2]["compare"]["abs_tol"] = 0;  // integers are fine
  CHECK(test::error_of(d).empty());
  d = valid_v2();
  d["cases"][0]["args"][2].erase("expected");
  d["cases"][0]["args"][2].erase("timed_expected");
  EXPECT_ERROR(d, "cases[0].args[2].compare: compares against nothing");
}

TEST_CASE("text that is not JSON is a bad request") {
  try {
    kernelopt::parse_request(std::string_view("{\"protocol\": 1,"));
    CHECK(false);
  } catch (const BadRequest& e) {
    CHECK(test::contains(e.what(), "request: not valid JSON"));
  }
}

TEST_MAIN()
