#!/bin/bash
touch marker
