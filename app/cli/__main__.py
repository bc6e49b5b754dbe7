from atlas_jobs._app.cli import main

main()
