#!/bin/bash
# The recipe line needs a tab, the link needs ops.o and libm.
set -euo pipefail
cd /app/calc
cat > Makefile <<'MK'
CC = gcc
CFLAGS = -O2 -Wall
LDLIBS = -lm
OBJS = main.o ops.o

calc: $(OBJS)
	$(CC) $(CFLAGS) -o calc $(OBJS) $(LDLIBS)

%.o: %.c ops.h
	$(CC) $(CFLAGS) -c $<

clean:
	rm -f calc *.o

.PHONY: clean
MK
make
