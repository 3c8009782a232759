"""The site: inventories (nodes, their profiles and site settings), how each is reached
(Ansible's connection facts), vault, BMC access."""
