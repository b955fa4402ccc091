"""The commands of `release-bench`, one module each: `COMMANDS` there names each command, its
help, the options it takes (`add_arguments`) and what it does (`main`, its exit status).
`harness.cli` builds the command line from them and dispatches; `common` and `judging` hold
what several commands share."""
