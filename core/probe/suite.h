// Long-context probes generated on the machine (no downloads): llama.cpp's passkey, RULER's needle-in-a-haystack
// tasks (niah_single_1, niah_multikey_2, niah_multikey_3), variable tracking (vt), common and frequent words (cwe,
// fwe), and a JSON tool call whose arguments are copied from early in the context. Each probe is a prompt sized to a
// token length with its needle at a depth, and the strings its answer must contain (RULER's string_match_all).
// Seeded: the same options give the same text byte for byte. No torch: the GUI and the CLI read it alike.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::probe {

enum class Task {
  Passkey,
  NiahSingle1,
  NiahMultikey2,
  NiahMultikey3,
  VariableTracking,
  CommonWords,
  FrequentWords,
  JsonToolCall
};

struct TaskInfo {
  Task task;
  std::string_view name;    ///< what --tasks and the records call it ("niah_multikey_2")
  std::string_view origin;  ///< whose task it reproduces
  std::string_view what;    ///< one line for --help
  bool depths;              ///< the needle is placed at a depth (else a probe per length, depth -1)
  int answerTokens;         ///< tokens generated at most (the prompt keeps room for them)
};
/// Every task, in the suite's order.
const std::vector<TaskInfo>& tasks();
const TaskInfo& info(Task t);
/// The task called `name`, or nothing.
std::optional<Task> taskNamed(std::string_view name);

struct Probe {
  Task task = Task::Passkey;
  std::int64_t length = 0;  ///< the token budget: prompt + answer tokens <= length
  int depth = -1;           ///< percent of the context before the needle (-1: the task has no depth)
  int sample = 0;
  std::string prompt;                ///< the whole text the model reads, the answer's opening words included
  std::vector<std::string> answers;  ///< what the answer must contain
  std::string id() const;            ///< "niah_single_1/4096/d50/s0"
};

/// The tokens a text is to the model (its BOS included): what sizes a prompt to a length.
using TokenCounter = std::function<std::int64_t(const std::string&)>;

/// One probe: the largest haystack whose prompt leaves the task's answer tokens within `length`. Its random choices
/// come from (seed, task, length, depth, sample) alone, so a probe is the same in any suite and any shard. Throws
/// Error (BadInput) when even the smallest haystack does not fit, or for a depth outside [0, 100].
Probe makeProbe(Task task, std::int64_t length, int depth, int sample, std::uint64_t seed, const TokenCounter& count);

struct SuiteOptions {
  std::vector<Task> tasks;            ///< empty: every task
  std::vector<std::int64_t> lengths;  ///< tokens
  std::vector<int> depths;            ///< percent, for the tasks with a depth
  int samples = 1;                    ///< probes per (task, length, depth)
  std::uint64_t seed = 0;
};
/// The grid, task by task, length by length, depth by depth, sample by sample.
std::vector<Probe> makeSuite(const SuiteOptions& o, const TokenCounter& count);

/// The grid's axes as a user types them, comma-separated: tasks by name (empty: every task), lengths in tokens ("4096",
/// "4k"), depths in percent (0 to 100). Throw Error (BadInput) naming the item that is not one.
std::vector<Task> parseTasks(std::string_view text);
std::vector<std::int64_t> parseLengths(std::string_view text);
std::vector<int> parseDepths(std::string_view text);

/// RULER's string_match_all: the fraction of the probe's answers found in the prediction (case-insensitive
/// substrings), after RULER's clean-up (control characters as newlines, outer whitespace stripped).
double score(const Probe& p, std::string_view prediction);

}  // namespace kvscope::probe
