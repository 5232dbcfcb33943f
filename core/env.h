// core/env.h: the HEED_* environment variables heed reads (README.md,
// "Environment variables"), read one way.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace heed::env {

// A yes/no value: 1, on, true, yes or 0, off, false, no, in any case;
// nothing for anything else.
std::optional<bool> parse_flag(const std::string& value);

// The yes/no variable `name`: `fallback` when it is unset or empty, else its
// value (parse_flag); any other value throws heed::Error naming the
// variable, the value and the values expected.
bool flag(const char* name, bool fallback);

// What is wrong with the HEED_* variables of the environment, as a one-line
// message naming the first bad one, its value and what is expected; "" when
// every one is well-formed. A program checks this before it touches any file
// (heed's command-line program does, for every command): the variables are
// otherwise read where they are first used, in the middle of the work.
std::string problem();

// The HEED_* names in the environment that heed does not read (a misspelled
// HEED_NO_CACHHE would otherwise be ignored without a word), sorted.
std::vector<std::string> unknown();

// Every HEED_* variable heed reads.
const std::vector<std::string>& known();

// The note about unknown() a program prints ("HEED_NO_CACHHE is not a
// variable heed reads (it reads ...); ignored"): the first time it is asked
// for in a process, and "" afterwards or when every name is known, so the
// `heed` command and the heed::Run it starts say it once.
std::string unknown_note();

// The Python that draws heed plot's figures: HEED_PYTHON when it is set (a
// path, or a program's name looked up on PATH as a shell does), else
// /usr/bin/python3 (returned whether it is there or not: the caller says
// what to install). A HEED_PYTHON that names no program that can be run (a
// missing file, a directory, a file that is not executable) throws
// heed::Error naming the variable, its value and what is expected: a
// Python 3 interpreter with `needs`, the Debian packages the caller imports.
std::string python(const std::string& needs = "python3-numpy, python3-h5py and python3-matplotlib");

}  // namespace heed::env
