#!/bin/bash
cd reports
for f in *.txt; do
  mv -- "$f" "${f%.txt}.md"
done
