#!/bin/bash
echo "$ANSWER" > /app/answer
