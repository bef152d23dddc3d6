from postlab.cli import entry

entry()
