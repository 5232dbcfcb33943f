#!/usr/bin/env python3
"""snippets.py DOC.md OUT.cpp: the ```cpp blocks of DOC.md, in order, as one
C++ file. #line directives point compiler messages at the lines of DOC.md."""
import re
import sys


def main(doc_path, out_path):
    lines = open(doc_path, encoding="utf-8").read().split("\n")
    out, block, start = [], None, 0
    for number, line in enumerate(lines, 1):
        if block is None:
            if re.fullmatch(r"```cpp\s*", line):
                block, start = [], number + 1
        elif line.strip() == "```":
            out.append(f'#line {start} "{doc_path}"')
            out.extend(block)
            block = None
        else:
            block.append(line)
    if block is not None:
        sys.exit(f"{doc_path}:{start - 1}: a ```cpp block is never closed")
    if not out:
        sys.exit(f"{doc_path}: no ```cpp blocks")
    text = f"// Generated from {doc_path} by tests/docs/snippets.py; edit the document.\n" + "\n".join(out) + "\n"
    try:
        if open(out_path, encoding="utf-8").read() == text:
            return  # unchanged: keep the timestamp, no rebuild
    except FileNotFoundError:
        pass
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: snippets.py DOC.md OUT.cpp")
    main(sys.argv[1], sys.argv[2])
