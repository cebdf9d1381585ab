#!/bin/sh
echo "Hello, $2!"
