from bench.backlog import main

raise SystemExit(main())
