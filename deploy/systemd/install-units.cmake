# Installs the systemd units with ExecStart pointing at the binary of the
# prefix being installed to (cmake --install --prefix P gives P/sbin/sluice).
# Run by cmake --install (install(SCRIPT) in the top CMakeLists.txt) with
# SLUICE_SRC, SLUICE_UNIT_TMP, SLUICE_SBINDIR and SLUICE_SYSTEMD_UNITDIR set.
if(IS_ABSOLUTE "${SLUICE_SBINDIR}")
	set(_sbin "${SLUICE_SBINDIR}")
else()
	set(_sbin "${CMAKE_INSTALL_PREFIX}/${SLUICE_SBINDIR}")
endif()
if(IS_ABSOLUTE "${SLUICE_SYSTEMD_UNITDIR}")
	set(_unitdir "${SLUICE_SYSTEMD_UNITDIR}")
else()
	set(_unitdir "${CMAKE_INSTALL_PREFIX}/${SLUICE_SYSTEMD_UNITDIR}")
endif()
set(_units)
foreach(u sluice.service sluice-user.service)
	file(READ "${SLUICE_SRC}/deploy/systemd/${u}" _text)
	string(REPLACE "/usr/sbin/sluice" "${_sbin}/sluice" _text "${_text}")
	file(WRITE "${SLUICE_UNIT_TMP}/${u}" "${_text}")
	list(APPEND _units "${SLUICE_UNIT_TMP}/${u}")
endforeach()
file(INSTALL DESTINATION "${_unitdir}" TYPE FILE FILES ${_units})
