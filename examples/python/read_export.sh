#!/usr/bin/env bash
# Reads `stockledger export` files as an analyst's notebook would, with
# pyarrow from PyPI (a virtual environment under
# ~/.stockledger/venv-python-analyst); arguments go to read_export.py, e.g.
#   examples/python/read_export.sh --parquet week.parquet --csv week.csv
exec "$(dirname "$0")/with_venv.sh" venv-python-analyst requirements-analyst.txt read_export.py "$@"
