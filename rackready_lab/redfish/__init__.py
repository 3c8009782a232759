"""Lab BMCs: a Redfish service per lab node (iDRAC9- and iLO 6-shaped trees), see README.md."""
