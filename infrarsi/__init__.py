"""InfraRSI engine: contract, trial records, statistics and search.

Pure Python (numpy/scipy): no git, no subprocess, no network. Importing the
package is cheap on purpose, because training scripts import ``infrarsi.probe``.
"""

__version__ = "0.1.0"
