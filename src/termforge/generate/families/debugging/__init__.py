"""The debugging families, one module each: a Python tool and a shell script, each with planted
bugs to find and fix (the bug-site machinery they share is planted_bugs)."""
