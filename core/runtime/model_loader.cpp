#include "runtime/model_loader.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "model/gguf.h"

namespace kvscope::runtime {
namespace fs = std::filesystem;

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

// The folder of the running program (Linux: /proc/self/exe); empty when it cannot be read.
fs::path programFolder() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}
}  // namespace

std::vector<std::string> modelSearchPlaces() {
  std::vector<std::string> places;
  if (const std::string m = env("KVSCOPE_MODEL"); !m.empty()) places.push_back(m);
  std::string cache = env("KVSCOPE_CACHE");
  if (cache.empty()) {
    const std::string home = env("HOME");
    if (!home.empty()) cache = home + "/.cache/kvscope";
  }
  if (!cache.empty()) places.push_back(cache + "/model/SmolLM2-135M-Instruct.Q4_1.gguf");
  if (const fs::path dir = programFolder(); !dir.empty()) {
    const fs::path shipped = (dir / ".." / "share" / "kvscope" / "models").lexically_normal();
    std::vector<std::string> ggufs;
    std::error_code ec;
    for (fs::directory_iterator it(shipped, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file(ec) && it->path().extension() == ".gguf") ggufs.push_back(it->path().string());
    std::sort(ggufs.begin(), ggufs.end());
    if (ggufs.empty()) ggufs.push_back((shipped / "*.gguf").string());  // said where it looked when none is there
    places.insert(places.end(), ggufs.begin(), ggufs.end());
  }
  return places;
}

std::string defaultModelPath() {
  if (const std::string m = env("KVSCOPE_MODEL"); !m.empty()) return m;
  std::error_code ec;
  for (const auto& p : modelSearchPlaces())
    if (fs::exists(p, ec)) return p;
  return {};
}

at::ScalarType parseDtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16") return at::kHalf;
  throw Error(ErrorCode::BadInput, fmt::format("unknown dtype `{}` (fp32, bf16 or fp16)", name));
}

LoadedModel loadModel(const std::string& path, const std::string& dtype, const model::ProgressFn& progress) {
  return loadModel(path, device::ExecutionContext(c10::kCPU, parseDtype(dtype)), progress);
}

LoadedModel loadModel(const std::string& pathIn, const device::ExecutionContext& ctx, const model::ProgressFn& progress,
                      std::uint32_t requantize) {
  LoadedModel m;
  m.path = pathIn.empty() ? defaultModelPath() : pathIn;
  if (m.path.empty()) {
    std::string looked;
    for (const auto& p : modelSearchPlaces()) looked += (looked.empty() ? "" : ", ") + p;
    throw ModelNotFound(
        fmt::format("no model found (looked in {}); pass a GGUF file or a Hugging Face directory, "
                    "or run packaging/setup.sh to fetch the embedded model",
                    looked.empty() ? "no place: neither HOME nor KVSCOPE_CACHE is set" : looked));
  }
  std::error_code ec;
  if (!fs::exists(m.path, ec))
    throw ModelNotFound(
        fmt::format("model `{}` not found (packaging/setup.sh fetches the embedded model; or pass a "
                    "GGUF file or a Hugging Face directory)",
                    m.path));
  if (fs::is_directory(m.path, ec)) {
    const fs::path tj = fs::path(m.path) / "tokenizer.json";
    if (!fs::exists(tj, ec)) throw ModelNotFound(fmt::format("{}: no tokenizer.json", m.path));
    m.tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::fromTokenizerJson(tj.string()));
  } else {
    model::GgufFile g(m.path);
    m.tokenizer = std::make_unique<tokenizer::Tokenizer>(tokenizer::fromGguf(g));
  }
  m.model = model::LlamaModel::load(m.path, ctx, progress, requantize);
  return m;
}

}  // namespace kvscope::runtime
