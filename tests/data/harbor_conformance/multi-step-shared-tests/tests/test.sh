#!/bin/bash
. /tests/lib.sh
sleep 3
reward cmp -s /tests/expected.txt /app/made
