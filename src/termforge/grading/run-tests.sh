#!/bin/bash
exec /usr/bin/python3 -I /verifier/grade.py --request "$@"
