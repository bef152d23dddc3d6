from postlab.cli import entry

# Guarded: worker processes re-import the main module, which must not start the CLI again.
if __name__ == "__main__":
    entry()
