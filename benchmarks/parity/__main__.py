from benchmarks.parity.run import main

main()
