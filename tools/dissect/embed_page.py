#!/usr/bin/env python3
"""embed_page.py IN.html OUT.cpp: the page template as a C++ string (uroce-dissect --html)."""
import sys

src, out = sys.argv[1], sys.argv[2]
text = open(src, encoding="utf-8").read()
delim = "uroce_page"
if ")" + delim + '"' in text:
    sys.exit(f"{src} holds the raw string's end marker")
# A raw string literal, split every 16 kB of text so no single literal is huge.
parts = [text[i:i + 16384] for i in range(0, len(text), 16384)] or [""]
with open(out, "w", encoding="utf-8") as f:
    f.write("// Made by tools/dissect/embed_page.py from page.html: edit that, not this.\n")
    f.write('#include "tools/dissect/page.hpp"\n\nnamespace uroce::dissect {\n\nconst char* const kPageHtml =\n')
    for p in parts:
        f.write(f'    R"{delim}({p}){delim}"\n')
    f.write(";\n\n}  // namespace uroce::dissect\n")
