# kubegpu.nvidia: the two commands a new user needs (see README.md).
#   make lab   set everything up, bring up the lab of simulated GPU nodes and
#              run the collection's main job against it
#   make test  set everything up and run the whole test suite
#   make ee    build the execution environment on the lab's image and run site.yml --check on the lab from it
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help bootstrap lab lab-down test bench build ee

help:
	@echo "make lab      bring up the lab of simulated GPU nodes and run the main job on it"
	@echo "make test     run the whole test suite (lint, sanity, unit, functional, molecule)"
	@echo "make bench    run the benchmarks in bench/ and print their figures"
	@echo "make lab-down remove the lab"
	@echo "make ee       build the execution environment image and run site.yml --check on the lab (up) from it"

bootstrap:
	@scripts/bootstrap.sh

lab: bootstrap
	@scripts/lab.sh up

lab-down: bootstrap
	@scripts/lab.sh down

test: bootstrap
	@scripts/test.sh $(STAGES)

bench: bootstrap
	@scripts/bench.sh

ee: bootstrap
	@scripts/ee.sh

build: bootstrap
	@scripts/test.sh build
