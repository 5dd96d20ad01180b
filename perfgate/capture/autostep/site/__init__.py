"""Not imported as a package: this folder is put first on a profiled process's ``PYTHONPATH``
so that its ``sitecustomize.py`` runs at interpreter start (see perfgate.capture.autostep.install). It is a
package only so that every install of perfgate ships ``sitecustomize.py``."""
