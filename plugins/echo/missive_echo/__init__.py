"""missive-echo: a scripted driver (see :mod:`missive_echo.driver`)."""
