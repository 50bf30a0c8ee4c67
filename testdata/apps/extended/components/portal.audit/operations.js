exports.append = async () => ({})
