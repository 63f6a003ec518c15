#!/bin/bash

cut -d: -f1 /app/server.log | sort | uniq -c | awk '{print $2, $1}' > /app/levels.txt
