"""The pytest side of a gate run besides the plugin itself: the report plugins registered for a run (terminal list
of reports, the Allure integration) and the mapping from pytest items to the targets they check. Everything here may
import pytest and the live `GateRun`; nothing below the plugin layer imports it."""
