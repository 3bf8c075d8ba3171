from oncegraph.cli import main

main()
