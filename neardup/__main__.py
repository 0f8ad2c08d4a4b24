from neardup.cli import main

raise SystemExit(main())
