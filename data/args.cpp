// data/args.cpp
#include "data/args.h"

#include <algorithm>
#include <charconv>

#include "core/error.h"

namespace heed {

namespace {
template <class... A>
[[noreturn]] void usage(fmt::format_string<A...> f, A&&... a) {
  throw UsageError(fmt::format(f, std::forward<A>(a)...));
}
}  // namespace


Args& Args::integer(const std::string& name, int64_t* v, const std::string& help, int64_t min, int64_t max) {
  std::string range = min == INT64_MIN ? "an integer"
                      : max == INT64_MAX ? fmt::format("an integer >= {}", min)
                                         : fmt::format("an integer in {}..{}", min, max);
  check_new(name);
  // A program's own declaration: bounds that admit nothing.
  if (min > max)
    fail("{}: --{} is declared with the range {}..{}: its lower bound exceeds its upper", command_, name, min, max);
  opts_.push_back({name, help, "N", false,
                   [=, this](const std::string& s, bool) {
                     // The whole text, as written: no space, no '+' (strtoll took ' 5' and '+5').
                     int64_t x = 0;
                     const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
                     if (s.empty() || ec != std::errc() || end != s.data() + s.size() || x < min || x > max)
                       // Past what int64 holds, a bound the range leaves unsaid is the one crossed: name both.
                       usage("{}: --{} expects {}, got '{}'", command_, name,
                             ec == std::errc::result_out_of_range ? fmt::format("an integer in {}..{}", min, max)
                                                                  : range,
                             s);
                     *v = x;
                   },
                   [v] { return std::to_string(*v); },
                   [v, min, max, range] { return *v < min || *v > max ? range : std::string(); }});
  if (min != INT64_MIN && max != INT64_MAX) limits_[name] = fmt::format("{}..{}", min, max);
  return *this;
}

Args& Args::real(const std::string& name, double* v, const std::string& help, double min, double max,
                 bool min_exclusive, bool max_exclusive) {
  std::string range = min <= -1e300 ? "a number"
                      : max >= 1e300 ? fmt::format("a number {} {}", min_exclusive ? ">" : ">=", min)
                                     : fmt::format("a number in {}{}, {}{}", min_exclusive ? "(" : "[", min, max,
                                                   max_exclusive ? ")" : "]");
  check_new(name);
  if (!(min <= max) || ((min_exclusive || max_exclusive) && min == max))
    fail("{}: --{} is declared with the range {}: it admits no number", command_, name, range);
  opts_.push_back({name, help, "X", false,
                   [=, this](const std::string& s, bool) {
                     // Decimal or scientific only (strtod also took ' 5', '+5' and hex: '0x10' was 16).
                     double x = 0;
                     const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
                     const bool low = min_exclusive ? x <= min : x < min, high = max_exclusive ? x >= max : x > max;
                     if (s.empty() || ec != std::errc() || end != s.data() + s.size() || x != x || low || high)
                       usage("{}: --{} expects {}, got '{}'", command_, name, range, s);
                     *v = x;
                   },
                   [v] { return fmt::format("{}", *v); },
                   [=] {
                     const double x = *v;
                     const bool low = min_exclusive ? x <= min : x < min, high = max_exclusive ? x >= max : x > max;
                     return x != x || low || high ? range : std::string();
                   }});
  if (min > -1e300 && max < 1e300)
    limits_[name] = fmt::format("{}{}, {}{}", min_exclusive ? "(" : "[", min, max, max_exclusive ? ")" : "]");
  return *this;
}

Args& Args::text(const std::string& name, std::string* v, const std::string& help) {
  return add_text(name, v, help, "TEXT");
}

Args& Args::path(const std::string& name, std::string* v, const std::string& help, PathKind kind) {
  return add_text(name, v, help, kind == PathKind::file ? "FILE" : kind == PathKind::dir ? "DIR" : "PATH");
}

Args& Args::add_text(const std::string& name, std::string* v, const std::string& help, const std::string& metavar) {
  check_new(name);
  opts_.push_back({name, help, metavar, false, [=, this](const std::string& s, bool restoring) {
                     if (s.empty() && !restoring)
                       usage("{}: --{} expects a value, got an empty string", command_, name);
                     *v = s;
                   },
                   [v] { return *v; }});
  return *this;
}

namespace {
// "a", "a or b", "a, b or c": the choices as a message names them.
std::string either(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i)
    s += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return s;
}

// The items of a comma-separated list, empty ones kept ("a,,b": a, "", b).
std::vector<std::string> split_items(const std::string& s) {
  std::vector<std::string> items;
  for (size_t at = 0;;) {
    const size_t comma = s.find(',', at);
    items.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return items;
    at = comma + 1;
  }
}

// The column --help gives an option and its value (help()'s {:<28}).
constexpr size_t kHelpColumn = 28;
}  // namespace

Args& Args::choice(const std::string& name, std::string* v, const std::vector<std::string>& choices,
                   const std::string& help, const std::map<std::string, std::string>& aliases) {
  return add_choice(name, v, choices, help, aliases, false);
}

Args& Args::choices(const std::string& name, std::string* v, const std::vector<std::string>& choices,
                    const std::string& help) {
  return add_choice(name, v, choices, help, {}, true);
}

Args& Args::add_choice(const std::string& name, std::string* v, const std::vector<std::string>& choices,
                       const std::string& help, const std::map<std::string, std::string>& aliases, bool list) {
  check_new(name);
  // A program's own declaration: choices a value cannot be told apart by, or
  // a default the option refuses (a run would record it, and its resume
  // refuse to read it back).
  if (choices.empty()) fail("{}: --{} is declared as a choice of nothing", command_, name);
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string& c = choices[i];
    if (c.empty() || (list && c.find(',') != std::string::npos))
      fail("{}: --{} is declared with the choice '{}'; expected a non-empty name{}", command_, name, c,
           list ? " without a comma" : "");
    if (std::find(choices.begin(), choices.begin() + static_cast<std::ptrdiff_t>(i), c) !=
        choices.begin() + static_cast<std::ptrdiff_t>(i))
      fail("{}: --{} is declared with the choice '{}' twice", command_, name, c);
  }
  for (const auto& [alias, target] : aliases)
    if (std::find(choices.begin(), choices.end(), target) == choices.end() ||
        std::find(choices.begin(), choices.end(), alias) != choices.end())
      fail("{}: --{} is declared with the alias '{}' of '{}'; expected another name for one of {}", command_, name,
           alias, target, either(choices));
  const std::string expected = either(choices);
  // The value as stored: its choice, or (a list) the items as given; throws
  // the UsageError that names option, value and choices.
  auto read = [=, this](const std::string& s) -> std::string {
    auto one = [&](const std::string& item) -> std::string {
      if (std::find(choices.begin(), choices.end(), item) != choices.end()) return item;
      if (const auto a = aliases.find(item); a != aliases.end()) return a->second;
      return "";
    };
    if (!list) {
      const std::string c = one(s);
      if (c.empty()) usage("{}: --{} expects {}, got '{}'", command_, name, expected, s);
      return c;
    }
    if (s.empty()) usage("{}: --{} expects a value, got an empty string", command_, name);
    std::vector<std::string> seen;
    for (const std::string& item : split_items(s)) {
      const std::string in = s == item ? "" : fmt::format(" (in '{}')", s);
      if (item.empty())
        usage("{}: --{} expects one or more of {}, comma-separated, got an empty item in '{}'", command_, name,
              expected, s);
      if (one(item).empty())
        usage("{}: --{} expects one or more of {}, comma-separated, got '{}'{}", command_, name, expected, item,
              in);
      if (std::find(seen.begin(), seen.end(), item) != seen.end())
        usage("{}: --{} names '{}' twice in '{}'; expected each once", command_, name, item, s);
      seen.push_back(item);
    }
    return s;
  };
  const bool default_none = v->empty();
  bool default_ok = default_none || std::find(choices.begin(), choices.end(), *v) != choices.end();
  if (list && !default_none) {
    try {
      read(*v);
      default_ok = true;
    } catch (const UsageError&) {
    }
  }
  if (!default_ok)
    fail("{}: --{} is declared with the default '{}'; expected {}{} (or \"\": none)", command_, name, *v,
         list ? "a comma-separated list of " : "", expected);
  std::string metavar = fmt::format("{{{}}}{}", fmt::join(choices, ","), list ? "[,...]" : "");
  if (("--" + name + " " + metavar).size() > kHelpColumn) {
    metavar = list ? "CHOICE[,...]" : "CHOICE";
    one_of_[name] = fmt::format("{}", fmt::join(choices, ", "));
  }
  opts_.push_back({name, help, metavar, false,
                   [=, this](const std::string& s, bool restoring) {
                     // A checkpoint records "" for an option left without a default.
                     if (restoring && s.empty() && default_none) {
                       v->clear();
                       return;
                     }
                     *v = read(s);
                   },
                   [v] { return *v; }});
  return *this;
}

Args& Args::flag(const std::string& name, bool* v, const std::string& help) {
  check_new(name);
  opts_.push_back({name, help, "", true, [v](const std::string& s, bool) { *v = s != "false"; },
                   [v] { return std::string(*v ? "true" : "false"); }});
  return *this;
}

void Args::check_new(const std::string& name) const {
  // A second --steps would be shown twice and read into one of the two only.
  if (find(name)) fail("{}: option --{} is declared twice (a program's own option named like one of heed::Run's?)",
                       command_, name);
}

const Args::Opt* Args::find(const std::string& name) const {
  for (const auto& o : opts_)
    if (o.name == name) return &o;
  return nullptr;
}

bool Args::parse(const std::vector<std::string>& args) { return parse(args, nullptr, ""); }

bool Args::parse(const std::vector<std::string>& args, std::string* positional, const std::string& what) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {  // anywhere: help, not an error about the rest
      fmt::print("{}", help());
      return false;
    }
  // "--help=1" was "unknown option '--help'": it is known, and takes no value.
  for (const auto& a : args)
    if (a.rfind("--help=", 0) == 0 || a.rfind("-h=", 0) == 0)
      usage("{}: --help takes no value, got '{}' (expected --help alone)", command_, a);
  bool took = false;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    for (const auto& [short_name, long_name] : aliases_)
      if (a == short_name) a = "--" + long_name;
    if (positional && !took && !a.empty() && a[0] != '-') {
      *positional = a;
      took = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) usage("{}: unexpected argument '{}' (options start with --; see --help)", command_, a);
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    const Opt* o = find(name);
    if (!o) usage("{}: unknown option '--{}' (see --help)", command_, name);
    if (const auto w = withheld_.find(name); w != withheld_.end()) usage("{}: --{} {}", command_, name, w->second);
    // "--steps 5 --steps 7" took the last value without a word: which one was
    // meant is the user's to say (no option of heed's takes several values
    // this way; a list is one value, comma-separated).
    if (given(name)) usage("{}: --{} is given twice; expected it once", command_, name);
    given_.push_back(name);
    if (o->is_flag) {
      if (has_value) usage("{}: --{} is a flag and takes no value", command_, name);
      o->set("", false);
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) usage("{}: --{} expects a value ({})", command_, name, o->metavar);
      value = args[++i];
      // "--prompt --tokens 5": an option where its value was expected.
      std::string next = value.rfind("--", 0) == 0 ? value.substr(2, value.find('=') - 2) : "";
      for (const auto& [short_name, long_name] : aliases_)
        if (value == short_name) next = long_name;
      if (!next.empty() && find(next))
        usage("{}: --{} expects a value ({}), got the option '{}' (a value that looks like an option is written "
              "--{}=VALUE)",
              command_, name, o->metavar, value, name);
    }
    o->set(value, false);
  }
  if (positional && !took) usage("{}: expected {} (see --help)", command_, what);
  if (!defer_default_check_) check_defaults();
  return true;
}

void Args::check_defaults() const {
  for (const Opt& o : opts_) {
    if (given(o.name) || !o.out_of_range) continue;
    if (const std::string range = o.out_of_range(); !range.empty())
      usage("{}: --{} was not given, and its default {} is not {}: expected --{} on the command line", command_,
            o.name, o.show(), range, o.name);
  }
}

bool Args::given(const std::string& name) const {
  for (const auto& g : given_)
    if (g == name) return true;
  return false;
}

void Args::forget_given(const std::string& name) { std::erase(given_, name); }

void Args::assign(const std::string& name, const std::string& value) {
  const Opt* o = find(name);
  if (!o) fail("{}: unknown option '--{}'", command_, name);
  if (o->is_flag && value != "true" && value != "false")
    fail("{}: --{} is a flag, expected true or false, got '{}'", command_, name, value);
  o->set(value, true);
}

std::string Args::value(const std::string& name) const {
  const Opt* o = find(name);
  if (!o) fail("{}: unknown option '--{}'", command_, name);
  return o->show();
}

std::string Args::help() const {
  std::string s = fmt::format("usage: {} [options]\n\n{}\n\noptions:\n",
                              program_.empty() ? "heed " + command_ : program_, summary_);
  for (const auto& o : opts_) {
    if (withheld_.count(o.name)) continue;
    std::string lhs = "--" + o.name + (o.is_flag ? "" : " " + o.metavar);
    for (const auto& [short_name, long_name] : aliases_)
      if (long_name == o.name) lhs = short_name + ", " + lhs;
    s += fmt::format("  {:<28} {}", lhs, o.help);
    const auto lim = limits_.find(o.name);
    if (lim != limits_.end() && o.help.find(lim->second) == std::string::npos)
      s += lim->second.front() == '[' || lim->second.front() == '(' ? " " + lim->second  // a real's interval
                                                                      : fmt::format(" [{}]", lim->second);
    // The choices that did not fit beside the option (its value shows CHOICE).
    if (const auto c = one_of_.find(o.name); c != one_of_.end())
      s += fmt::format(" ({} of: {})", o.metavar == "CHOICE" ? "one" : "one or more", c->second);
    // The default, unless the help says it in its own words or there is none.
    const std::string shown = o.is_flag ? "" : o.show();
    if (!shown.empty() && o.help.find("(default:") == std::string::npos) s += fmt::format(" (default: {})", shown);
    s += "\n";
  }
  s += fmt::format("  {:<28} {}\n", "--help", "show this help");
  return s;
}

std::vector<std::pair<std::string, std::string>> Args::values() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& o : opts_) out.emplace_back(o.name, o.show());
  return out;
}

}  // namespace heed
