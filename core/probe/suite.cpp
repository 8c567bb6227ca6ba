#include "probe/suite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numbers>
#include <set>

#include "probe/detail.h"
#include "util/error.h"

namespace kvscope::probe {

namespace {

using detail::Rng;

// RULER's and llama.cpp's noise: one sentence group, a line of the haystack (a filler block of the passkey).
constexpr std::string_view kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

std::string fiveLetters(Rng& r, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += static_cast<char>('A' + r.below(26));
  return s;
}

std::string wordKey(Rng& r) {  // RULER's "words" keys: an adjective-noun pair
  const auto& a = detail::adjectives();
  const auto& n = detail::nouns();
  return fmt::format("{}-{}", a[r.below(a.size())], n[r.below(n.size())]);
}

std::string uuid4(Rng& r) {  // a random UUID, version 4 (as Python's uuid.UUID(int=..., version=4) prints it)
  std::uint64_t hi = r.next(), lo = r.next();
  hi = (hi & ~0xf000ull) | 0x4000ull;                  // version 4
  lo = (lo & ~(0xc000ull << 48)) | (0x8000ull << 48);  // RFC 4122 variant
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48,
                     lo & 0xffffffffffffull);
}

std::string joinLines(const std::vector<std::string>& lines, std::string_view sep = "\n") {
  std::string s;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) s += sep;
    s += lines[i];
  }
  return s;
}

// k distinct positions of [0, n), ascending.
std::vector<std::int64_t> sortedSample(Rng& r, std::int64_t n, int k) {
  std::set<std::int64_t> s;
  while (static_cast<int>(s.size()) < k) s.insert(static_cast<std::int64_t>(r.below(static_cast<std::uint64_t>(n))));
  return {s.begin(), s.end()};
}

std::int64_t atDepth(int depth, std::int64_t n) {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(depth) * static_cast<double>(n) / 100.0));
}

// A probe with `units` units of haystack (lines, filler blocks or words), its random choices from `seed` alone.
using Builder = void (*)(Probe& p, std::int64_t units, std::uint64_t seed);

// llama.cpp's examples/passkey: a prefix, filler blocks joined by spaces, the pass key before block i_pos.
void passkey(Probe& p, std::int64_t units, std::uint64_t seed) {
  Rng r(seed);
  const std::string key = std::to_string(r.between(10000, 99999));  // KIVI's five digits
  const std::int64_t pos = atDepth(p.depth, units);
  std::string s =
      "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
      "about the important information there.";
  for (std::int64_t i = 0; i <= units; ++i) {
    if (i == pos) s += fmt::format(" The pass key is {0}. Remember it. {0} is the pass key.", key);
    if (i < units) s += fmt::format(" {}", kNoise);
  }
  s += " What is the pass key? The pass key is";
  p.prompt = std::move(s);
  p.answers = {key};
}

// RULER's niah with one query and one value (its template made singular, as niah.py does): the haystack is noise
// lines (niah_single_1) or needles of other keys (niah_multikey_2: word keys, number values; _3: UUIDs for both).
void niah(Probe& p, std::int64_t units, std::uint64_t seed) {
  Rng r(seed);
  const bool uuids = p.task == Task::NiahMultikey3;
  const char* type = uuids ? "uuid" : "number";
  auto key = [&] { return uuids ? uuid4(r) : wordKey(r); };
  auto value = [&] { return uuids ? uuid4(r) : std::to_string(r.between(1000000, 9999999)); };
  auto needle = [&](const std::string& k, const std::string& v) {
    return fmt::format("One of the special magic {}s for {} is: {}.", type, k, v);
  };
  const std::string k = key(), v = value();
  std::vector<std::string> lines;
  if (p.task == Task::NiahSingle1) {
    lines.assign(static_cast<std::size_t>(units), std::string(kNoise));
  } else {
    std::set<std::string> used{k};
    while (static_cast<std::int64_t>(lines.size()) < units) {
      std::string dk = key();
      if (!used.insert(dk).second) continue;
      lines.push_back(needle(dk, value()));
    }
  }
  lines.insert(lines.begin() + atDepth(p.depth, units), needle(k, v));
  p.prompt = fmt::format(
      "A special magic {0} is hidden within the following text. Make sure to memorize it. I will quiz you about the "
      "{0} afterwards.\n{1}\nWhat is the special magic {0} for {2} mentioned in the provided text? The special magic "
      "{0} for {2} mentioned in the provided text is",
      type, joinLines(lines), k);
  p.answers = {v};
}

// RULER's variable tracking: one chain of four hops ("VAR B = VAR A ") among noise lines, after a one-shot example.
std::string vtText(const std::vector<std::string>& chain, std::int64_t value, std::vector<std::string> lines, Rng& r) {
  const std::vector<std::int64_t> at = sortedSample(
      r, std::max<std::int64_t>(static_cast<std::int64_t>(lines.size()), 1), static_cast<int>(chain.size()));
  for (std::size_t j = 0; j < chain.size(); ++j) {
    const std::string line =
        j == 0 ? fmt::format("VAR {} = {}", chain[0], value) : fmt::format("VAR {} = VAR {} ", chain[j], chain[j - 1]);
    lines.insert(lines.begin() + std::min<std::int64_t>(at[j] + static_cast<std::int64_t>(j),
                                                        static_cast<std::int64_t>(lines.size())),
                 line);
  }
  return fmt::format(
      "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n{}\nQuestion: Find all "
      "variables that are assigned the value {} in the text above. Answer: According to the chain(s) of variable "
      "assignment in the text above, {} variables are assigned the value {}, they are: ",
      joinLines(lines), value, chain.size(), value);
}

std::vector<std::string> vtChain(Rng& r, int letters) {
  std::vector<std::string> c;
  while (c.size() < 5) {
    std::string n = fiveLetters(r, letters);
    if (std::find(c.begin(), c.end(), n) == c.end()) c.push_back(std::move(n));
  }
  return c;
}

void variableTracking(Probe& p, std::int64_t units, std::uint64_t seed) {
  Rng r(seed);
  const std::vector<std::string> chain = vtChain(r, 5), example = vtChain(r, 3);
  const std::int64_t value = r.between(10000, 99999), exampleValue = r.between(10000, 99999);
  std::string ex = vtText(example, exampleValue, std::vector<std::string>(20, std::string(kNoise)), r);
  ex += " " + joinLines(example, " ") + "\n";
  p.prompt = ex + "\n" +
             vtText(chain, value, std::vector<std::string>(static_cast<std::size_t>(units), std::string(kNoise)), r);
  p.answers = chain;
}

// RULER's common words extraction: a numbered list where ten words come freq_cw times and the rest freq_ucw times,
// after one solved example.
std::string cweText(const std::vector<std::string>& words, int common, int rare, Rng& r, bool solved) {
  std::vector<std::string> list;
  for (std::size_t i = 0; i < words.size(); ++i)
    for (int c = 0; c < (i < 10 ? common : rare); ++c) list.push_back(words[i]);
  r.shuffle(list);
  std::string ctx;
  for (std::size_t i = 0; i < list.size(); ++i) ctx += fmt::format("{}{}. {}", i ? " " : "", i + 1, list[i]);
  std::string s = fmt::format(
      "Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that "
      "appear most often.\n{}\nQuestion: What are the 10 most common words in the above list? Answer: The top 10 words "
      "that appear most often in the list are:",
      ctx);
  if (solved)
    for (int i = 0; i < 10; ++i)
      s += fmt::format("{}{}. {}", i ? " " : "  ", i + 1, words[static_cast<std::size_t>(i)]);
  return s;
}

void commonWords(Probe& p, std::int64_t units, std::uint64_t seed) {
  Rng r(seed);
  std::set<std::string> u;
  for (auto w : detail::nouns()) u.insert(std::string(w));
  for (auto w : detail::adjectives()) u.insert(std::string(w));
  std::vector<std::string> pool(u.begin(), u.end());
  r.shuffle(pool);
  const bool longer = p.length >= 4096;  // RULER: 30 / 3 from 4,096 tokens (an example of 40 words at 10 / 3)
  const std::size_t exampleWords = longer ? 40 : 20;
  const std::vector<std::string> example(pool.end() - static_cast<std::ptrdiff_t>(exampleWords), pool.end());
  pool.resize(pool.size() - exampleWords);
  // Beyond the list's words: adjective-noun pairs, in the pool's order.
  for (std::size_t i = 0; static_cast<std::int64_t>(pool.size()) < units; ++i)
    pool.push_back(fmt::format("{}-{}", detail::adjectives()[i % detail::adjectives().size()],
                               detail::nouns()[(i * 7) % detail::nouns().size()]));
  const std::vector<std::string> words(pool.begin(), pool.begin() + units);
  const std::string ex = cweText(example, longer ? 10 : 3, longer ? 3 : 1, r, true);
  p.prompt = ex + "\n" + cweText(words, longer ? 30 : 6, longer ? 3 : 1, r, false);
  p.answers.assign(words.begin(), words.begin() + 10);
}

// RULER's frequent words extraction: coded six-letter words drawn with Zipf frequencies (alpha 2), the most frequent
// being "...", noise; the answer is the next three.
constexpr std::string_view kFweHead =
    "Read the following coded text and track the frequency of each coded word. Find the three most frequently "
    "appeared coded words. ";
constexpr std::string_view kFweTail =
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the three most frequently "
    "appeared words in the above coded text? Answer: According to the coded text above, the three most frequently "
    "appeared words are:";

void frequentWords(Probe& p, std::int64_t units, std::uint64_t seed) {
  Rng r(seed);
  // RULER: (length - answer tokens - the template's tokens) / 50 words; the template is about 80 tokens.
  const std::int64_t vocab = std::max<std::int64_t>((p.length - info(p.task).answerTokens - 80) / 50, 8);
  std::set<std::string> u;
  while (static_cast<std::int64_t>(u.size()) < vocab) {
    std::string w;
    for (int i = 0; i < 6; ++i) w += static_cast<char>('a' + r.below(26));
    u.insert(std::move(w));
  }
  std::vector<std::string> words(u.begin(), u.end());
  r.shuffle(words);
  words[0] = "...";
  const double zeta2 = std::numbers::pi * std::numbers::pi / 6.0;
  std::vector<std::string_view> list;
  for (std::int64_t k = 1; k <= vocab; ++k) {
    const auto c = static_cast<std::int64_t>(static_cast<double>(units) * std::pow(double(k), -2.0) / zeta2);
    for (std::int64_t i = 0; i < c; ++i) list.push_back(words[static_cast<std::size_t>(k - 1)]);
  }
  r.shuffle(list);
  std::string ctx;
  for (std::size_t i = 0; i < list.size(); ++i) (ctx += i ? " " : "") += list[i];
  p.prompt = std::string(kFweHead) + ctx + std::string(kFweTail);
  p.answers = {words[1], words[2], words[3]};
}

// A structured-output probe: a support log where one ticket asks for a refund; the prompt opens the JSON tool call,
// and its three arguments must be copied from that ticket.
void jsonToolCall(Probe& p, std::int64_t units, std::uint64_t seed) {
  static const std::vector<std::string_view> first = {"Ada",    "Bruno", "Chiara",  "Dmitri", "Elena", "Farid", "Greta",
                                                      "Hiro",   "Ines",  "Jonas",   "Kemal",  "Lena",  "Marco", "Nadia",
                                                      "Omar",   "Priya", "Quentin", "Rosa",   "Sven",  "Tariq", "Uma",
                                                      "Viktor", "Wanda", "Yusuf",   "Zofia"};
  static const std::vector<std::string_view> last = {"Abbott",  "Brandt", "Costa",   "Dubois", "Eriksen",  "Fischer",
                                                     "Garcia",  "Hansen", "Ivanova", "Jensen", "Kowalski", "Lindqvist",
                                                     "Moreau",  "Novak",  "Okafor",  "Petrov", "Quinn",    "Rossi",
                                                     "Schmidt", "Tanaka", "Usman",   "Varga",  "Weber",    "Yilmaz"};
  Rng r(seed);
  auto name = [&] { return fmt::format("{} {}", first[r.below(first.size())], last[r.below(last.size())]); };
  const std::string customer = name();
  const std::string order = fmt::format("ORD-{}-{}", r.between(10000, 99999), fiveLetters(r, 2));
  const std::string amount = fmt::format("{}.{:02}", r.between(20, 999), r.between(0, 99));
  std::vector<std::string> lines;
  for (std::int64_t i = 0; i < units; ++i) {
    const auto& n = detail::nouns();
    lines.push_back(fmt::format("Ticket {}: {} asked when the {} will be delivered; answered, no action needed.",
                                1000 + i, name(), n[r.below(n.size())]));
  }
  const std::int64_t at = atDepth(p.depth, units);
  lines.insert(lines.begin() + at, fmt::format("Ticket {}: {} asks for a refund of {} dollars for order {}.",
                                               1000 + units, customer, amount, order));
  p.prompt = fmt::format(
      "You are a support assistant with one tool: refund_order(order_id: string, customer: string, amount: number). "
      "Read the support log below.\n{}\nOne ticket above asks for a refund. Call the tool for it. Reply with the JSON "
      "tool call only.\n{{\"name\": \"refund_order\", \"arguments\": {{\"order_id\": \"",
      joinLines(lines));
  p.answers = {order + "\"", fmt::format("\"customer\": \"{}\"", customer), fmt::format("\"amount\": {}", amount)};
}

struct Generator {
  Builder build;
  std::int64_t minUnits;
};

Generator generatorOf(Task t) {
  switch (t) {
    case Task::Passkey:
      return {passkey, 1};
    case Task::NiahSingle1:
    case Task::NiahMultikey2:
    case Task::NiahMultikey3:
      return {niah, 1};
    case Task::VariableTracking:
      return {variableTracking, 5};
    case Task::CommonWords:
      return {commonWords, 11};
    case Task::FrequentWords:
      return {frequentWords, 40};
    case Task::JsonToolCall:
      return {jsonToolCall, 1};
  }
  throw Error(ErrorCode::Internal, "unknown probe task");
}

std::uint64_t probeSeed(std::uint64_t seed, Task t, std::int64_t length, int depth, int sample) {
  std::uint64_t h = seed;
  for (const std::uint64_t v : {static_cast<std::uint64_t>(t) + 1, static_cast<std::uint64_t>(length),
                                static_cast<std::uint64_t>(depth + 1), static_cast<std::uint64_t>(sample)})
    h = Rng(h ^ (v * 0x9e3779b97f4a7c15ull)).next();
  return h;
}

}  // namespace

const std::vector<TaskInfo>& tasks() {
  static const std::vector<TaskInfo> t = {
      {Task::Passkey, "passkey", "llama.cpp's passkey, KIVI's five digits",
       "a pass key in filler text, asked for at the end", true, 12},
      {Task::NiahSingle1, "niah_single_1", "RULER niah_single_1",
       "one needle (word key, 7-digit value) among noise lines", true, 24},
      {Task::NiahMultikey2, "niah_multikey_2", "RULER niah_multikey_2",
       "the queried needle among needles of other word keys", true, 24},
      {Task::NiahMultikey3, "niah_multikey_3", "RULER niah_multikey_3",
       "the queried needle among needles of other keys, UUID keys and values", true, 48},
      {Task::VariableTracking, "vt", "RULER vt: 1 chain of 4 hops",
       "every variable a chain of assignments gives one value", false, 30},
      {Task::CommonWords, "cwe", "RULER cwe", "the 10 most common words of a numbered list", false, 120},
      {Task::FrequentWords, "fwe", "RULER fwe: alpha 2", "the 3 most frequent coded words of a Zipf text", false, 50},
      {Task::JsonToolCall, "json_tool", "kvscope",
       "a JSON tool call whose arguments are copied from one ticket of a support log", true, 48},
  };
  return t;
}

const TaskInfo& info(Task t) {
  for (const TaskInfo& i : tasks())
    if (i.task == t) return i;
  throw Error(ErrorCode::Internal, "unknown probe task");
}

std::optional<Task> taskNamed(std::string_view name) {
  for (const TaskInfo& i : tasks())
    if (i.name == name) return i.task;
  return std::nullopt;
}

std::string Probe::id() const {
  return depth < 0 ? fmt::format("{}/{}/s{}", info(task).name, length, sample)
                   : fmt::format("{}/{}/d{}/s{}", info(task).name, length, depth, sample);
}

Probe makeProbe(Task task, std::int64_t length, int depth, int sample, std::uint64_t seed, const TokenCounter& count) {
  const TaskInfo& ti = info(task);
  if (!ti.depths)
    depth = -1;
  else if (depth < 0 || depth > 100)
    throw Error(ErrorCode::BadInput, fmt::format("probe depth {}% is outside 0..100", depth));
  const Generator g = generatorOf(task);
  const std::uint64_t s = probeSeed(seed, task, length, depth, sample);
  Probe p;
  p.task = task;
  p.length = length;
  p.depth = depth;
  p.sample = sample;
  auto fits = [&](std::int64_t units, Probe& out) {
    out = p;
    g.build(out, units, s);
    return count(out.prompt) + ti.answerTokens <= length;
  };
  // The largest haystack that fits: doubling, then halving the gap (a probe is a pure function of its units).
  Probe best, trial;
  std::int64_t lo = g.minUnits;
  if (!fits(lo, best))
    throw Error(ErrorCode::BadInput, fmt::format("a {} probe does not fit in {} tokens (its smallest prompt and {} "
                                                 "answer tokens are longer)",
                                                 ti.name, length, ti.answerTokens));
  std::int64_t hi = lo * 2;
  while (fits(hi, trial)) {
    best = trial;
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, trial)) {
      best = trial;
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return best;
}

std::vector<Probe> makeSuite(const SuiteOptions& o, const TokenCounter& count) {
  std::vector<Task> ts = o.tasks;
  if (ts.empty())
    for (const TaskInfo& i : tasks()) ts.push_back(i.task);
  std::vector<Probe> out;
  for (Task t : ts)
    for (std::int64_t len : o.lengths) {
      const std::vector<int> depths = info(t).depths ? o.depths : std::vector<int>{-1};
      for (int d : depths)
        for (int s = 0; s < o.samples; ++s) out.push_back(makeProbe(t, len, d, s, o.seed, count));
    }
  return out;
}

namespace {

std::vector<std::string> items(std::string_view s) {
  std::vector<std::string> out;
  std::size_t b = 0;
  while (b <= s.size()) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    std::string item(s.substr(b, e - b));
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (!item.empty()) out.push_back(std::move(item));
    b = e + 1;
  }
  return out;
}

// A whole number in [lo, hi] with an optional `k` (x 1024) where `kilo`, or nothing.
std::optional<std::int64_t> whole(std::string t, std::int64_t lo, std::int64_t hi, bool kilo) {
  std::int64_t mult = 1;
  if (kilo && !t.empty() && (t.back() == 'k' || t.back() == 'K')) {
    mult = 1024;
    t.pop_back();
  }
  if (t.empty() || t.size() > 9 || t.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::int64_t v = std::stoll(t) * mult;
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

}  // namespace

std::vector<Task> parseTasks(std::string_view text) {
  std::vector<Task> out;
  for (const std::string& t : items(text)) {
    const auto task = taskNamed(t);
    if (!task) {
      std::string names;
      for (const TaskInfo& i : tasks()) names += (names.empty() ? "" : ", ") + std::string(i.name);
      throw Error(ErrorCode::BadInput, fmt::format("no probe task `{}` (the tasks: {})", t, names));
    }
    out.push_back(*task);
  }
  return out;
}

std::vector<std::int64_t> parseLengths(std::string_view text) {
  std::vector<std::int64_t> out;
  for (const std::string& t : items(text)) {
    const auto v = whole(t, 64, std::int64_t{1} << 20, true);
    if (!v) throw Error(ErrorCode::BadInput, fmt::format("`{}` is not a token count from 64 (e.g. 4096 or 4k)", t));
    out.push_back(*v);
  }
  return out;
}

std::vector<int> parseDepths(std::string_view text) {
  std::vector<int> out;
  for (const std::string& t : items(text)) {
    const auto v = whole(t, 0, 100, false);
    if (!v) throw Error(ErrorCode::BadInput, fmt::format("`{}` is not a depth in percent from 0 to 100", t));
    out.push_back(static_cast<int>(*v));
  }
  return out;
}

double score(const Probe& p, std::string_view prediction) {
  std::string pred(prediction);
  for (char& c : pred)
    if (static_cast<unsigned char>(c) < 0x20) c = '\n';
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  const std::size_t b = pred.find_first_not_of(" \t\n\r\f\v");
  const std::size_t e = pred.find_last_not_of(" \t\n\r\f\v");
  pred = b == std::string::npos ? std::string() : lower(pred.substr(b, e - b + 1));
  if (p.answers.empty()) return 0.0;
  int found = 0;
  for (const std::string& a : p.answers) found += pred.find(lower(a)) != std::string::npos ? 1 : 0;
  return static_cast<double>(found) / static_cast<double>(p.answers.size());
}

}  // namespace kvscope::probe
