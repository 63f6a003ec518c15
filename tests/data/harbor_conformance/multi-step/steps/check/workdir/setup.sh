#!/bin/bash
# Harbor copies steps/<name>/workdir/ into the working directory and runs this there first.
touch /app/check-ready
