#!/bin/bash
echo done > /app/done
sleep 30
rm -f /app/done
