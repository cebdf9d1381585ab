#!/bin/bash
grep -c ERROR server.log > error_count.txt
