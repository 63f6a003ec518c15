#!/bin/bash
. /tests/lib.sh
reward test -f /app/made
