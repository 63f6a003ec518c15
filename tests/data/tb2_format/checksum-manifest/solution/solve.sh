#!/bin/bash

cd /app/files && sha256sum * > /app/manifest.sha256
