# aperio-client as a Windows service, run from an elevated PowerShell:
#
#   .\install-service.ps1 -Exe C:\Program Files\Aperio\aperio-client.exe -Config C:\ProgramData\Aperio\aperio.yaml
#
# The client answers the service manager itself (Start, Stop, Shutdown):
# Stop drains it (up to drain_timeout) before the service reports stopped.
# The service restarts after a failure (exit status other than 0); a client
# that retires after idle_timeout with idle_action exit stays stopped. The
# service manager keeps no output: run the same command interactively to
# read the client's log while setting it up. The configuration file holds
# the token: only SYSTEM and Administrators may read it.
param(
    [string]$Exe = "$env:ProgramFiles\Aperio\aperio-client.exe",
    [string]$Config = "$env:ProgramData\Aperio\aperio.yaml",
    [string]$Name = "aperio-client"
)
$ErrorActionPreference = "Stop"
if (-not (Test-Path $Exe)) { throw "no aperio-client at $Exe" }
if (-not (Test-Path $Config)) { throw "no configuration at $Config" }
& $Exe --config $Config --check-config
if ($LASTEXITCODE -ne 0) { throw "the configuration does not load: fix it first" }

icacls $Config /inheritance:r /grant:r "SYSTEM:(R)" "Administrators:(F)" | Out-Null
New-Service -Name $Name -DisplayName "Aperio client" -StartupType Automatic `
    -BinaryPathName "`"$Exe`" --config `"$Config`"" `
    -Description "Publishes local apps through an aperio-server"
# Restart 5 s after a failure, three times, the count reset after a day.
sc.exe failure $Name reset= 86400 actions= restart/5000/restart/5000/restart/5000 | Out-Null
sc.exe failureflag $Name 1 | Out-Null
Start-Service $Name
Get-Service $Name
