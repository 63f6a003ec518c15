#!/bin/bash
echo made > /app/made
