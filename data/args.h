// data/args.h: command-line options for heed's commands. Every option
// is declared with its type, default and help; a bad value is reported with
// the option, the value and what was expected, before any work starts.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace heed {

// A command line that cannot be parsed (exit status 2 in heed's commands).
struct UsageError : Error {
  using Error::Error;
};

class Args {
 public:
  Args(std::string command, std::string summary) : command_(std::move(command)), summary_(std::move(summary)) {}

  Args& integer(const std::string& name, int64_t* v, const std::string& help, int64_t min = INT64_MIN,
                int64_t max = INT64_MAX);
  Args& real(const std::string& name, double* v, const std::string& help, double min = -1e300, double max = 1e300,
             bool min_exclusive = false, bool max_exclusive = false);
  Args& text(const std::string& name, std::string* v, const std::string& help);
  // A text option that names a file or directory: as text(), and --help
  // (and a missing value's message) shows its value as FILE, DIR or PATH
  // (either) rather than TEXT.
  enum class PathKind { file, dir, any };
  Args& path(const std::string& name, std::string* v, const std::string& help, PathKind kind = PathKind::file);
  // An option whose value is one of a fixed set: --help shows them beside
  // the option ("--precision {f32,bf16}", or, where that does not fit the
  // column, "--method CHOICE" and "(one of: a, b, c)" after the help), and a
  // value outside them is refused naming the option, the value and the
  // choices. aliases maps other names of a choice to it ("float32" -> "f32"):
  // accepted, and stored as the choice. *v is the default: one of the
  // choices, or "" for none (not shown; the program reads "" as not given,
  // e.g. bench's --isa: the best this CPU has). A default outside the
  // choices, no choices, a repeated choice, or an alias of no choice is a
  // program's own error, refused here (heed::Error).
  Args& choice(const std::string& name, std::string* v, const std::vector<std::string>& choices,
               const std::string& help, const std::map<std::string, std::string>& aliases = {});
  // The same for a comma-separated list of choices ("--only gpt-128,nanogpt"):
  // each item must be one of them; --help shows "CHOICE[,...]" or
  // "{a,b}[,...]". Items are kept as given, in order, repeats refused.
  Args& choices(const std::string& name, std::string* v, const std::vector<std::string>& choices,
                const std::string& help);
  Args& flag(const std::string& name, bool* v, const std::string& help);

  // Parses args (without the command words). Returns false when --help was
  // asked for (help is printed); throws UsageError on a bad option.
  bool parse(const std::vector<std::string>& args);
  // The same, for a command that also takes one argument of its own (a
  // file): the first argument that is neither an option nor an option's
  // value goes to *positional, wherever it stands; without one, a
  // UsageError says `what` was expected ("a checkpoint path").
  bool parse(const std::vector<std::string>& args, std::string* positional, const std::string& what);
  // A short name for an option: alias("o", "out") reads -o FILE as --out FILE.
  Args& alias(const std::string& short_name, const std::string& long_name) {
    aliases_.emplace_back("-" + short_name, long_name);
    return *this;
  }
  // An option this command does not offer though it is declared (heed::Run
  // declares its own for every run, in Run::parse): left out of the help,
  // and refused when given, "<command>: --<name> <why>". It keeps its default.
  Args& withhold(const std::string& name, const std::string& why) {
    withheld_[name] = why;
    return *this;
  }
  std::string help() const;
  // Options not given whose default lies outside their own declared range
  // (an integer >= 1 left at 0: a value the program expects the user to
  // give) are refused, naming the option, its default and the range. parse()
  // checks this at its end, unless defer_default_check() was called first:
  // heed::Run calls check_defaults() itself for a new run, since a resume
  // restores those options from its checkpoint.
  void defer_default_check() { defer_default_check_ = true; }
  void check_defaults() const;
  // How the usage line names the program (default: "heed <command>"), e.g.
  // a user's own program's path.
  void set_program(std::string program) { program_ = std::move(program); }
  // Whether the option appeared on the command line (not just its default).
  bool given(const std::string& name) const;
  // Counts the option as not given after all: its value on the command line
  // stood for one restored from elsewhere (Run: a placeholder given on
  // resume, data/run.h).
  void forget_given(const std::string& name);
  // Sets an option from its saved text (a checkpoint's configuration, as
  // values() wrote it; a text option may be empty there); throws naming the
  // option and the value when it does not fit.
  void assign(const std::string& name, const std::string& value);
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const std::string& command() const { return command_; }
  // One option's value as values() writes it.
  std::string value(const std::string& name) const;
  // The options as "name=value" pairs, for logging the full config.
  std::vector<std::pair<std::string, std::string>> values() const;

 private:
  struct Opt {
    std::string name, help, metavar;
    bool is_flag = false;
    std::function<void(const std::string&, bool restoring)> set;
    std::function<std::string()> show;
    std::function<std::string()> out_of_range = {};  // the declared range when the value lies outside it, else ""
  };
  bool defer_default_check_ = false;
  const Opt* find(const std::string& name) const;
  Args& add_text(const std::string& name, std::string* v, const std::string& help, const std::string& metavar);
  Args& add_choice(const std::string& name, std::string* v, const std::vector<std::string>& choices,
                   const std::string& help, const std::map<std::string, std::string>& aliases, bool list);
  void check_new(const std::string& name) const;
  std::string command_, summary_, program_;
  std::vector<std::pair<std::string, std::string>> aliases_;  // "-o" -> "out"
  std::vector<Opt> opts_;
  std::map<std::string, std::string> limits_;  // "1..1024" (integers), "[0, 1)" (reals): ranges shown in the help when bounded above
  std::map<std::string, std::string> one_of_;  // a choice option whose choices do not fit its metavar: "a, b, c"
  std::vector<std::string> given_;
  std::map<std::string, std::string> withheld_;  // name -> why it is refused
};

}  // namespace heed
