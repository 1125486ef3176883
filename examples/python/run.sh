#!/usr/bin/env bash
# Runs the Python order service against a stockledger pipeline, with
# confluent-kafka and fastavro from PyPI (a virtual environment under
# ~/.stockledger/venv-python-example); arguments go to order_service.py, e.g.
#   examples/python/run.sh --brokers 127.0.0.1:9092 --topic stock.ledger
exec "$(dirname "$0")/with_venv.sh" venv-python-example requirements.txt order_service.py "$@"
